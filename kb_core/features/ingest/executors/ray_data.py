"""The ``ray`` import executor: parsing, chunking and embedding as Ray Data stages on a Ray cluster.

Pipeline (streaming; each stage starts as soon as the one before has output)::

    read_binary_files(local://…) ─map_batches(parse_and_chunk, tasks)→ ─map_batches(ChunkEmbedder, actor pool)→ driver

* Files are read lazily by Ray Data's read tasks on the driver's node (``local://``) and travel as bytes through
  Ray's object store, so worker nodes need not see the driver's disk, and neither the importing process nor the
  driver holds them (#37: 8 files of 96 MB once drove the importer to 2.5 GB). Through Ray Client (``ray://``),
  where no task runs on this machine, the driver puts them into the object store one at a time.
* Chunks travel to the embedding stage as JSON (:meth:`Chunk.to_dict`) with their token ids beside them in
  packed arrays (:func:`pack_token_ids`), so the actors embed from the ids the chunker made and tokenise no chunk
  text again (#15).
* The embedding stage is a pool of actors, one per GPU when the cluster has GPUs (each actor takes one), else
  one per node; each loads the model once. Ray restarts an actor that dies and retries its batch
  (``max_restarts``/``max_task_retries`` default to -1 for Ray Data actor pools): nothing is lost, and a
  result that arrives twice is dropped by the importer.
* Results stream back to the driver, which commits them through the normal commit protocol
  (:meth:`kb_core.features.ingest.pipeline.Importer._run_executor`): a driver or worker that dies leaves the KB
  consistent.
* An actor whose node sees the home's embedding cache (one machine, or the home on a shared file system)
  answers repeated texts from it and stores what it embeds, so a re-run costs no model time.
* A cluster that is not there, or that dies mid-import, is an error within seconds (#29), not minutes of Ray's
  own reconnection attempts: the address is probed before anything starts, for a gRPC server (an HTTP/2
  handshake, as Ray's GCS answers it) within ``CONNECT_TIMEOUT_S``, so a port where something else listens is
  refused at once (#37: it passed a TCP probe and hung), and the driver must have joined the cluster within
  ``JOIN_TIMEOUT_S``. The Ray driver runs in a child process (:func:`serve_driver`) that streams the results to
  the importing process: Ray ends a driver whose node's raylet dies, and so it ends that child, not the import.
  The importing process probes the cluster's GCS every second while it waits; a driver that exits, or a cluster
  silent for ``LOST_AFTER_S``, stops the import with ``EXECUTOR_FAILED`` naming the address (what was committed
  stays; the other files fail with that reason).
* The driver runs in a process group of its own: a cancel (the first Ctrl-C of ``kb import``) stops it and
  everything it started within about a second, and so does the end of the importing process, however it ends
  (SIGTERM, SIGKILL): the driver watches the pipe from it and ends its group when that closes.

Every node needs ``kb-workbench[ray]`` installed (the same version as the driver) and the model package.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.base.errors import InvalidArgument, KBError
from kb_core.base.json_text import json_text
from kb_core.engines.embedding.base import embed_with_token_ids
from kb_core.engines.embedding.device import DeviceRequest
from kb_core.features.ingest.executors import ExecutedDocument, ImportCancelled

if TYPE_CHECKING:
    import pandas as pd

    from kb_core.engines.chunking import Chunk
    from kb_core.engines.embedding.base import TokenIds
    from kb_core.engines.parsing import ParseLimits
    from kb_core.store.sink import ImportSource

logger = logging.getLogger(__name__)

MAX_EMBED_DOCUMENTS = 64  # documents per embedding call at most (a few hundred chunks: a full GPU batch)
MAX_BLOCKS = 256  # input blocks: enough to spread parsing, few enough to keep Ray Data's bookkeeping small
ACTOR_START_TIMEOUT_S = 600  # loading a model on a busy node can take a while
CONNECT_TIMEOUT_S = 5.0  # a cluster's address must accept a connection and answer as a gRPC server within this
JOIN_TIMEOUT_S = 60.0  # the driver must have joined the cluster (ray.init) within this
STOP_GRACE_S = 5.0  # a stopped driver's group is killed after this
# An HTTP/2 client's connection preface and an empty SETTINGS frame: a gRPC server (Ray's GCS, Ray Client's
# server) answers with a SETTINGS frame of its own; an HTTP/1 server, a database or a silent port does not.
HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
_FRAME_HEADER = 9
_SETTINGS = 4
LOST_AFTER_S = 6.0  # a cluster whose GCS has not answered for this long is gone
INSTALL_HINT = "install the optional extra: pip install 'kb-workbench[ray]'"


def _ray() -> Any:
    try:
        import ray
        import ray.data  # the extra, not only ray core
    except ImportError as exc:
        raise InvalidArgument(f"the ray executor needs Ray Data, which is not installed; {INSTALL_HINT}") from exc
    return ray


def _node_id() -> str:
    import ray

    return str(ray.get_runtime_context().get_node_id())


TOKEN_COLUMNS = ("token_counts", "token_ids", "token_offsets", "tokenizer")


def pack_token_ids(chunks: Sequence[Chunk]) -> dict[str, Any]:
    """The chunks' token ids as row columns Ray can carry: ``token_counts`` (JSON: each chunk's id count, -1 for a
    chunk without ids), ``token_ids`` and ``token_offsets`` (int32 bytes, the chunks with ids one after another)
    and ``tokenizer`` (their fingerprint; ids of one document come from one tokenizer)."""
    with_ids = [c.token_ids for c in chunks if c.token_ids is not None]
    return {
        "token_counts": json_text([-1 if c.token_ids is None else len(c.token_ids) for c in chunks]),
        "token_ids": b"".join(np.ascontiguousarray(t.ids, dtype=np.int32).tobytes() for t in with_ids),
        "token_offsets": b"".join(np.ascontiguousarray(t.offsets, dtype=np.int32).tobytes() for t in with_ids),
        "tokenizer": with_ids[0].tokenizer if with_ids else "",
    }


def unpack_token_ids(row: dict[str, Any]) -> list[TokenIds | None]:
    """The inverse of :func:`pack_token_ids`: each chunk's :class:`TokenIds`, or None."""
    from kb_core.engines.embedding.base import TokenIds

    counts = json.loads(row.get("token_counts") or "[]")
    ids = np.frombuffer(row.get("token_ids") or b"", dtype=np.int32)
    offsets = np.frombuffer(row.get("token_offsets") or b"", dtype=np.int32).reshape(-1, 2)
    out: list[TokenIds | None] = []
    start = 0
    for count in counts:
        if count < 0:
            out.append(None)
            continue
        out.append(TokenIds(ids[start : start + count], offsets[start : start + count], str(row["tokenizer"])))
        start += count
    return out


def _rows(batch: pd.DataFrame, sources: dict[str, tuple[int, str]] | None) -> Iterator[tuple[int, str, Any]]:
    """(index, name, bytes) of each file of a batch: read by ``read_binary_files`` (a ``path`` and ``bytes`` per row,
    ``sources`` naming each path), or put into the object store by a Ray Client driver (an ``index``, a ``name``
    and a ``ref``), fetched one at a time."""
    if "path" in batch:
        assert sources is not None
        for path, data in zip(batch["path"], batch["bytes"], strict=True):
            index, name = sources[str(path).removeprefix("local://")]
            yield index, name, data
        return
    import ray

    for index, name, ref in zip(batch["index"], batch["name"], batch["ref"], strict=True):
        yield int(index), str(name), ray.get(ref)


def parse_and_chunk(
    batch: pd.DataFrame,
    *,
    model: str,
    chunk_size: int,
    limits: ParseLimits,
    sources: dict[str, tuple[int, str]] | None = None,
) -> pd.DataFrame:
    """Ray Data stage 1 (tasks): each row's file bytes → text and chunks (JSON), or the error."""
    import pandas as pd

    from kb_core.engines.chunking import chunk_document
    from kb_core.engines.embedding import get_embedder
    from kb_core.engines.parsing import parse_file

    # Shared by this worker's tasks (loading a tokenizer per file cost ~25 ms); a local model's loads without the model.
    tokenizer = get_embedder(model).tokenizer
    rows: list[dict[str, Any]] = []
    for index, name, data in _rows(batch, sources):
        row: dict[str, Any] = {"index": int(index), "file_type": "", "text": "", "chunks": "[]", "error": ""}
        row.update(pack_token_ids([]))
        with tempfile.TemporaryDirectory(prefix="kb-ray-parse-") as folder:
            path = Path(folder) / str(name)  # the original name, so messages name the user's file
            path.write_bytes(bytes(data))
            try:
                parsed = parse_file(path, limits)
                chunks = chunk_document(parsed, tokenizer, chunk_size)
                if not chunks:
                    row["error"] = f"{name}: the document has no text to index."
                else:
                    row.update(
                        file_type=parsed.file_type,
                        text=parsed.text,
                        chunks=json_text([c.to_dict() for c in chunks]),
                        **pack_token_ids(chunks),
                    )
            except KBError as exc:
                row["error"] = exc.message
            except Exception as exc:  # a parser bug fails one file, not the import
                logger.exception("unexpected failure parsing %s", name)
                row["error"] = f"unexpected error: {type(exc).__name__}"
        row["parse_node"] = _node_id()
        rows.append(row)
    return pd.DataFrame(rows)


class _CountingEmbedder:
    """The model, counting the texts it embeds (the rest came from the cache)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.texts = 0
        self.model_key, self.dimension = inner.model_key, inner.dimension
        self.max_input_tokens, self.tokenizer = inner.max_input_tokens, inner.tokenizer

    def embed_documents(
        self,
        texts: Sequence[str],
        progress: Any = None,
        *,
        token_ids: Sequence[TokenIds | None] | None = None,
    ) -> np.ndarray:
        self.texts += len(texts)
        return self.inner.embed_documents(texts, progress, token_ids=token_ids)

    def embed_query(self, text: str) -> np.ndarray:
        return self.inner.embed_query(text)


class ChunkEmbedder:
    """Ray Data stage 2 (actor pool): embeds every chunk of a batch of documents with the KB's model."""

    def __init__(
        self, model: str, device: DeviceRequest, cache_path: str | None, crash_marker: str | None = None
    ) -> None:
        from kb_core.engines.embedding import CachedEmbedder, EmbeddingCache, create_embedder

        self.model = _CountingEmbedder(create_embedder(model, device=device))
        # The home's cache only where this node sees it (same machine or shared file system); never a new file.
        if cache_path and Path(cache_path).is_file():
            self.embedder: Any = CachedEmbedder(self.model, EmbeddingCache(cache_path))
        else:
            self.embedder = self.model
        self.crash_marker = crash_marker
        self.node = _node_id()
        self.actor = f"{self.node[:8]}:{os.getpid()}"
        # Load the model now: the pool counts this actor as ready only then, so no batch waits on a loading actor
        # while another sits idle.
        self.model.inner.embed_documents(["warm-up"])

    def __call__(self, batch: pd.DataFrame) -> pd.DataFrame:
        if self.crash_marker:
            try:
                os.unlink(self.crash_marker)  # whoever removes it crashes, exactly once (fault injection for tests)
            except FileNotFoundError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        contents = [[c["content"] for c in json.loads(chunks)] for chunks in batch["chunks"]]
        flat = [text for texts in contents for text in texts]
        rows = batch.to_dict("records")
        token_ids = [ids for row in rows for ids in unpack_token_ids(row)]
        hits = 0
        if flat:
            before = self.model.texts
            vectors = np.asarray(embed_with_token_ids(self.embedder, flat, token_ids), dtype=np.float32)
            hits = len(flat) - (self.model.texts - before)  # texts the model did not see: cache answers, repeats
        else:
            vectors = np.zeros((0, int(self.embedder.dimension)), dtype=np.float32)
        # The ids stay here: the driver needs the vectors, not the tokens.
        out = batch.drop(columns=["vectors", *TOKEN_COLUMNS], errors="ignore").copy()
        blobs: list[bytes] = []
        start = 0
        for texts in contents:
            blobs.append(np.ascontiguousarray(vectors[start : start + len(texts)]).tobytes())
            start += len(texts)
        out["vectors"] = blobs
        out["dimension"] = int(vectors.shape[1]) if len(flat) else int(self.embedder.dimension)
        out["embed_node"] = self.node
        out["embed_actor"] = self.actor
        out["cache_hits"] = [hits] + [0] * (len(out) - 1)  # the batch's count, once
        return out


class RayExecutor:
    """Runs an import's parsing, chunking and embedding on a Ray cluster (``address``: ``ray://…``,
    ``HOST:PORT`` or ``auto``; ``None``: the cluster this process is connected to, else a new local one)."""

    name = "ray"

    def __init__(
        self,
        *,
        model: str,
        device: DeviceRequest,
        cache_path: str | None,
        limits: ParseLimits,
        address: str | None = None,
        actors: int | None = None,
        crash_marker: str | None = None,
    ) -> None:
        self.model = model
        self.device = device
        self.cache_path = cache_path
        self.limits = limits
        self.address = address
        self.actors = actors
        self.crash_marker = crash_marker
        self._summary: dict[str, object] = {}

    def connect(self) -> Any:
        ray = _ray()
        # The library logs, never prints: no progress bars, and Ray Data's INFO lines stay out of stderr.
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False
        # Start every embedding actor before handing out work, so the first one up does not take it all.
        context.wait_for_min_actors_s = ACTOR_START_TIMEOUT_S
        logging.getLogger("ray.data").setLevel(logging.WARNING)
        if ray.is_initialized():
            return ray
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if address and address not in ("auto", "local"):
            probe_address(address)  # nothing listening: an error now, not Ray's minutes of retries
        try:
            if address:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            else:
                ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
        except Exception as exc:
            where = f"at {address!r}" if address else "on this machine"
            raise InvalidArgument(f"cannot start or reach a Ray cluster {where}: {exc}") from exc
        return ray

    def execute(
        self, sources: Sequence[ImportSource], chunk_size: int, cancel: threading.Event | None = None
    ) -> Iterator[ExecutedDocument]:
        """The documents, from a Ray driver in a child process (see the module docstring); ``cancel`` stops it."""
        ray = _ray()
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if ray.is_initialized():  # this process is connected: the child joins the same cluster
            address = _gcs_address(ray) or address
        if address and address not in ("auto", "local"):
            probe_address(address)  # nothing listening: an error now, not Ray's minutes of retries
        items = [(i, str(source.path.resolve())) for i, source in enumerate(sources)]  # read there, not here
        job = _DriverJob(
            model=self.model,
            device=self.device,
            cache_path=self.cache_path,
            limits=self.limits,
            address=address,
            actors=self.actors,
            crash_marker=self.crash_marker,
            chunk_size=chunk_size,
            items=items,
        )
        driver = _Driver(job)
        try:
            yield from driver.results(cancel)
            self._summary = driver.summary
        finally:
            driver.stop()

    def execute_here(self, items: Sequence[tuple[int, str]], chunk_size: int) -> Iterator[ExecutedDocument]:
        """The pipeline, driven from this process (the child of :meth:`execute`); ``items``: (index, path)."""
        from kb_core.engines.chunking import Chunk

        ray = self.connect()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        gpus = int(ray.cluster_resources().get("GPU", 0))
        actors = self.actors or gpus or max(1, len(nodes))
        blocks = max(1, min(len(items), MAX_BLOCKS))
        sources: dict[str, tuple[int, str]] | None = None
        if ray.util.client.ray.is_connected():  # Ray Client: no task runs on this machine
            rows = []
            for index, path in items:  # one file in this process at a time
                rows.append({"index": index, "name": Path(path).name, "ref": ray.put(Path(path).read_bytes())})
            files = ray.data.from_items(rows, override_num_blocks=blocks)
        else:  # read lazily by tasks on this node, as the stages downstream take them
            sources = {path: (index, Path(path).name) for index, path in items}
            files = ray.data.read_binary_files(
                [f"local://{path}" for _, path in items], include_paths=True, override_num_blocks=blocks
            )
        dataset = (
            files.map_batches(
                parse_and_chunk,
                batch_size=1,
                batch_format="pandas",
                fn_kwargs={"model": self.model, "chunk_size": chunk_size, "limits": self.limits, "sources": sources},
                # Half a CPU: parsing tasks fit beside the embedding actors, and the different request keeps Ray
                # from fusing the two stages into one (which would parse inside the embedding actors, serially).
                num_cpus=0.5,
            )
            .map_batches(
                ChunkEmbedder,
                # Small enough that a short import still gives every actor a share.
                batch_size=max(1, min(MAX_EMBED_DOCUMENTS, len(items) // (4 * actors))),
                batch_format="pandas",
                fn_constructor_kwargs={
                    "model": self.model,
                    "device": self.device,
                    "cache_path": self.cache_path,
                    "crash_marker": self.crash_marker,
                },
                # One batch at a time per actor: a queued batch waits on a busy actor while another sits idle.
                compute=ray.data.ActorPoolStrategy(size=actors, max_tasks_in_flight_per_actor=1),
                num_cpus=1,
                num_gpus=1 if gpus else 0,
            )
        )
        chunks_per_node: Counter[str] = Counter()
        parsed_per_node: Counter[str] = Counter()
        cache_hits = 0
        chunks_per_actor: Counter[str] = Counter()
        for batch in _batches(dataset):
            for row in batch.to_dict("records"):
                parsed_per_node[str(row["parse_node"])] += 1
                if row["error"]:
                    yield ExecutedDocument(index=int(row["index"]), error=str(row["error"]))
                    continue
                chunks = [Chunk(**c) for c in json.loads(row["chunks"])]
                vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(len(chunks), int(row["dimension"]))
                chunks_per_node[str(row["embed_node"])] += len(chunks)
                chunks_per_actor[str(row["embed_actor"])] += len(chunks)
                cache_hits += int(row["cache_hits"])
                yield ExecutedDocument(
                    index=int(row["index"]),
                    file_type=str(row["file_type"]),
                    text=str(row["text"]),
                    chunks=chunks,
                    vectors=vectors,
                )
        self._summary = {
            "executor": "ray",
            "nodes": len(nodes),
            "embedding_actors": actors,
            "gpus": gpus,
            "files_parsed_per_node": dict(parsed_per_node),
            "chunks_embedded_per_node": dict(chunks_per_node),
            "chunks_embedded_per_actor": dict(chunks_per_actor),
            "chunks_from_cache": cache_hits,
        }

    def summary(self) -> dict[str, object]:
        return dict(self._summary)


def probe_address(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`InvalidArgument` naming ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``) unless, within
    ``timeout`` seconds, something there accepts a TCP connection and answers an HTTP/2 handshake as the gRPC
    servers of Ray do (its GCS, Ray Client's server)."""
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except (OSError, UnicodeError) as exc:  # UnicodeError: a host name IDNA cannot encode
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise InvalidArgument(
            f"no Ray cluster answers at {address!r} ({reason}): start one there (ray start --head), or leave "
            "--address out to start a local one",
            details={"field": "address", "address": address},
        ) from exc
    answer = b""
    with connection:
        try:
            connection.settimeout(max(0.05, deadline - time.monotonic()))
            connection.sendall(HTTP2_PREFACE)
            while len(answer) < _FRAME_HEADER:
                connection.settimeout(max(0.05, deadline - time.monotonic()))
                piece = connection.recv(_FRAME_HEADER - len(answer))
                if not piece:
                    break
                answer += piece
        except OSError:  # a time-out, or a reset: no HTTP/2 answer
            pass
    if len(answer) == _FRAME_HEADER and answer[3] == _SETTINGS and answer[5:9] == bytes(4):
        return
    if not answer:
        what = f"nothing within {timeout:g} s"
    elif answer.startswith(b"HTTP/"):
        what = "as an HTTP/1 server"
    else:
        what = f"{answer[:_FRAME_HEADER]!r}"
    raise InvalidArgument(
        f"something listens at {address!r}, but not a Ray cluster: Ray's GCS speaks gRPC (HTTP/2), and this "
        f"answered {what}; give the address `ray start --head` printed (HOST:6379), or leave --address out to "
        "start a local one",
        details={"field": "address", "address": address},
    )


def _host_port(address: str) -> tuple[str, int]:
    """The host and port of ``HOST:PORT``, ``[V6]:PORT`` or ``ray://HOST:PORT`` (Ray's default port without one);
    :class:`InvalidArgument` for anything else."""
    malformed = InvalidArgument(
        f"malformed Ray address {address[:200]!r}: use HOST:PORT or ray://HOST:PORT",
        details={"field": "address"},
    )
    rest = (address.split("://", 1)[1] if "://" in address else address).rstrip("/")
    if ":" in rest.rsplit("]", 1)[-1]:
        host, _, port = rest.rpartition(":")
    else:  # no port: Ray's defaults
        host, port = rest, "10001" if address.startswith("ray://") else "6379"
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or len(host) > 253 or not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise malformed
    if any(c.isspace() or c in "/?#@" for c in host) or any(len(label) > 63 for label in host.split(".")):
        raise malformed
    if ":" in host:  # only an IPv6 address has one
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise malformed from None
    return host, int(port)


def _gcs_address(ray: Any) -> str | None:
    try:
        return str(ray.get_runtime_context().gcs_address)
    except Exception:  # an older Ray: no watchdog
        return None


def _batches(dataset: Any) -> Iterator[pd.DataFrame]:
    """The pipeline's output; a failure Ray gave up on (a retried batch that failed again, an actor that could not
    start) becomes a :class:`KBError`, so the importer fails what it had not committed, with the reason."""
    iterator = iter(dataset.iter_batches(batch_size=None, batch_format="pandas"))
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            return
        except Exception as exc:
            logger.exception("the Ray pipeline failed")
            reason = str(exc).strip().splitlines()[-1][:300] if str(exc).strip() else ""
            raise KBError(
                f"the ray executor failed: {type(exc).__name__}{': ' + reason if reason else ''}",
                code="EXECUTOR_FAILED",
            ) from exc
        yield batch


@dataclass(frozen=True)
class _DriverJob:
    """What the driver process is asked to run (picklable)."""

    model: str
    device: DeviceRequest
    cache_path: str | None
    limits: ParseLimits
    address: str | None
    actors: int | None
    crash_marker: str | None
    chunk_size: int
    items: list[tuple[int, str]]  # (index, path): the driver reads the files, the importing process does not


def serve_driver() -> None:
    """The driver process: reads a :class:`_DriverJob` on stdin and answers on the original stdout with
    ``("connected", gcs address)``, one ``("document", ExecutedDocument)`` per file, then ``("done", summary)``
    or ``("error", kind, code, message, details)``. Ray's own output goes to stderr."""
    from kb_core.engines.parsing.isolation import PipeConnection

    protocol_out = os.dup(1)
    os.dup2(2, 1)
    conn = PipeConnection(0, protocol_out)
    job: _DriverJob = conn.recv()
    threading.Thread(target=_end_with_the_importer, name="kb-ray-importer-watch", daemon=True).start()
    executor = RayExecutor(
        model=job.model,
        device=job.device,
        cache_path=job.cache_path,
        limits=job.limits,
        address=job.address,
        actors=job.actors,
        crash_marker=job.crash_marker,
    )
    try:
        ray = executor.connect()
        conn.send(("connected", _gcs_address(ray)))
        for document in executor.execute_here(job.items, job.chunk_size):
            conn.send(("document", document))
        conn.send(("done", executor.summary()))
    except KBError as exc:
        conn.send(("error", type(exc).__name__, exc.code, exc.message, exc.details))
    except Exception as exc:
        logger.exception("the Ray driver failed")
        conn.send(("error", "KBError", "EXECUTOR_FAILED", f"the ray executor failed: {type(exc).__name__}: {exc}", {}))


def _end_with_the_importer() -> None:
    """In the driver: the importing process keeps this process's stdin open until it has stopped it, so the end of
    that pipe means the importer is gone (SIGTERM, SIGKILL, a crash): end this process group, the driver and what
    it started, rather than run on orphaned."""
    try:
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


class _Driver:
    """The importing process's side of :func:`serve_driver`: the child process, its results, and a watchdog."""

    def __init__(self, job: _DriverJob) -> None:
        from kb_core.engines.parsing.isolation import PipeConnection

        self.address = job.address
        self.summary: dict[str, object] = {}
        package_root = str(Path(__file__).resolve().parents[4])  # the folder holding kb_core
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from kb_core.features.ingest.executors.ray_data import serve_driver; serve_driver()",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
            start_new_session=True,  # a group of its own: stopped as a whole, and out of the terminal's Ctrl-C
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.conn = PipeConnection(self.process.stdout.fileno(), self.process.stdin.fileno())
        self.conn.send(job)

    def results(self, cancel: threading.Event | None = None) -> Iterator[ExecutedDocument]:
        silent_since: float | None = None
        started, joined = time.monotonic(), False
        while True:
            if cancel is not None and cancel.is_set():
                raise ImportCancelled()
            if not self.conn.poll(1.0):
                if self.process.poll() is not None:
                    raise self._lost()
                if not joined:
                    if time.monotonic() - started >= JOIN_TIMEOUT_S:
                        raise self._not_joined()
                    continue
                if self.address is None or self.address in ("auto", "local") or _answers(self.address):
                    silent_since = None
                elif silent_since is None:
                    silent_since = time.monotonic()
                elif time.monotonic() - silent_since >= LOST_AFTER_S:
                    raise self._lost(f"no reply for {LOST_AFTER_S:g} s")
                continue
            try:
                message = self.conn.recv()
            except (EOFError, OSError):
                raise self._lost() from None
            kind = message[0]
            if kind == "connected":
                joined = True
                self.address = message[1] or self.address  # the GCS the driver joined (or started)
            elif kind == "document":
                yield message[1]
            elif kind == "done":
                self.summary = message[1]
                return
            else:
                _, name, code, text, details = message
                error = InvalidArgument if name == "InvalidArgument" else KBError
                raise error(text, code=code, details=details)

    def _lost(self, why: str = "") -> KBError:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(0 if why else 3)  # a closed pipe comes just before the exit code
        returncode = self.process.returncode
        where = f"the Ray cluster at {self.address}" if self.address else "the local Ray cluster"
        if why or (self.address and not _answers(self.address)):
            reason = f"{where} stopped answering{f' ({why})' if why else ''}"
        else:
            reason = (
                f"the Ray driver process for {where} exited mid-import (code {returncode}): the cluster or its node "
                "failed"
            )
        logger.error("ray executor: %s", reason)
        return KBError(
            f"the ray executor failed: {reason}; the files not committed yet were not imported",
            code="EXECUTOR_FAILED",
            details={"address": self.address},
        )

    def _not_joined(self) -> KBError:
        where = f"the Ray cluster at {self.address!r}" if self.address else "a local Ray cluster"
        reason = f"the Ray driver did not join {where} within {JOIN_TIMEOUT_S:g} s"
        logger.error("ray executor: %s", reason)
        return KBError(
            f"the ray executor failed: {reason}; check --address (`ray start --head` prints it)",
            code="EXECUTOR_FAILED",
            details={"address": self.address},
        )

    def stop(self) -> None:
        """End the driver (a finished one exits by itself; a cancelled or failed import's is stopped with everything
        it started: SIGTERM to its process group, SIGKILL after :data:`STOP_GRACE_S`)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10 if self.process.poll() is None and self.summary else 0.1)
        if self.process.poll() is None:
            self._signal_group(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(STOP_GRACE_S)
            self._signal_group(signal.SIGKILL)
            self.process.wait(10)
        self._signal_group(signal.SIGKILL)  # anything of its group that outlived it
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


    def _signal_group(self, number: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, number)


def _answers(address: str) -> bool:
    try:
        host, port = _host_port(address)
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except (OSError, KBError):
        return False


def ray_executor_for(
    *,
    model: str,
    endpoint: str | None,
    device: DeviceRequest,
    cache_path: str | None,
    limits: ParseLimits,
    address: str | None,
) -> RayExecutor:
    """A :class:`RayExecutor` for a KB's model; endpoint KBs are refused (their key stays on this machine)."""
    if endpoint:
        raise InvalidArgument(
            f"the ray executor embeds with local models only; this KB uses the endpoint {endpoint!r} "
            "(import it with the local executor)",
            details={"field": "executor"},
        )
    _ray()
    return RayExecutor(model=model, device=device, cache_path=cache_path, limits=limits, address=address)
