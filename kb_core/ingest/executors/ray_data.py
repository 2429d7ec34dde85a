"""The ``ray`` import executor: parsing, chunking and embedding as Ray Data stages on a Ray cluster.

Pipeline (streaming; each stage starts as soon as the one before has output)::

    from_items(files as bytes) ─map_batches(parse_and_chunk, tasks)→ ─map_batches(ChunkEmbedder, actor pool)→ driver

* Files travel as bytes through Ray's object store, so worker nodes need not see the driver's disk.
* Chunks travel to the embedding stage as JSON (:meth:`Chunk.to_dict`) with their token ids beside them in
  packed arrays (:func:`pack_token_ids`), so the actors embed from the ids the chunker made and tokenise no chunk
  text again (#15).
* The embedding stage is a pool of actors, one per GPU when the cluster has GPUs (each actor takes one), else
  one per node; each loads the model once. Ray restarts an actor that dies and retries its batch
  (``max_restarts``/``max_task_retries`` default to -1 for Ray Data actor pools): nothing is lost, and a
  result that arrives twice is dropped by the importer.
* Results stream back to the driver, which commits them through the normal commit protocol
  (:meth:`kb_core.ingest.pipeline.Importer._run_executor`): a driver or worker that dies leaves the KB consistent.
* An actor whose node sees the home's embedding cache (one machine, or the home on a shared file system)
  answers repeated texts from it and stores what it embeds, so a re-run costs no model time.
* A cluster that is not there, or that dies mid-import, is an error within seconds (#29), not minutes of Ray's
  own reconnection attempts: the address is probed (TCP, ``CONNECT_TIMEOUT_S``) before anything starts. The Ray
  driver runs in a child process (:func:`serve_driver`) that streams the results to the importing process: Ray
  ends a driver whose node's raylet dies, and so it ends that child, not the import. The importing process probes
  the cluster's GCS every second while it waits; a driver that exits, or a cluster silent for ``LOST_AFTER_S``,
  stops the import with ``EXECUTOR_FAILED`` naming the address (what was committed stays; the other files fail
  with that reason).

Every node needs ``kb-workbench[ray]`` installed (the same version as the driver) and the model package.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from kb_core.embedding.base import embed_with_token_ids
from kb_core.embedding.device import DeviceRequest
from kb_core.errors import InvalidArgument, KBError
from kb_core.ingest.executors import ExecutedDocument
from kb_core.json_text import json_text

if TYPE_CHECKING:
    import pandas as pd

    from kb_core.embedding.base import TokenIds
    from kb_core.ingest.chunking import Chunk
    from kb_core.ingest.parsing import ParseLimits
    from kb_core.store.sink import ImportSource

logger = logging.getLogger(__name__)

MAX_EMBED_DOCUMENTS = 64  # documents per embedding call at most (a few hundred chunks: a full GPU batch)
MAX_BLOCKS = 256  # input blocks: enough to spread parsing, few enough to keep Ray Data's bookkeeping small
ACTOR_START_TIMEOUT_S = 600  # loading a model on a busy node can take a while
CONNECT_TIMEOUT_S = 5.0  # a cluster's address must accept a connection within this
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
    from kb_core.embedding.base import TokenIds

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


def parse_and_chunk(batch: pd.DataFrame, *, model: str, chunk_size: int, limits: ParseLimits) -> pd.DataFrame:
    """Ray Data stage 1 (tasks): each row's file bytes → text and chunks (JSON), or the error."""
    import pandas as pd

    from kb_core.embedding import get_embedder
    from kb_core.ingest.chunking import chunk_document
    from kb_core.ingest.parsing import parse_file

    # Shared by this worker's tasks (loading a tokenizer per file cost ~25 ms); a local model's loads without the model.
    tokenizer = get_embedder(model).tokenizer
    rows: list[dict[str, Any]] = []
    for index, name, data in zip(batch["index"], batch["name"], batch["data"], strict=True):
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
        from kb_core.embedding import CachedEmbedder, EmbeddingCache, create_embedder

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

    def execute(self, sources: Sequence[ImportSource], chunk_size: int) -> Iterator[ExecutedDocument]:
        """The documents, from a Ray driver in a child process (see the module docstring)."""
        ray = _ray()
        address = self.address or os.environ.get("RAY_ADDRESS") or None
        if ray.is_initialized():  # this process is connected: the child joins the same cluster
            address = _gcs_address(ray) or address
        if address and address not in ("auto", "local"):
            probe_address(address)  # nothing listening: an error now, not Ray's minutes of retries
        items = [(i, source.path.name, source.path.read_bytes()) for i, source in enumerate(sources)]
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
            yield from driver.results()
            self._summary = driver.summary
        finally:
            driver.stop()

    def execute_here(self, items: Sequence[tuple[int, str, bytes]], chunk_size: int) -> Iterator[ExecutedDocument]:
        """The pipeline, driven from this process (the child of :meth:`execute`)."""
        from kb_core.ingest.chunking import Chunk

        ray = self.connect()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        gpus = int(ray.cluster_resources().get("GPU", 0))
        actors = self.actors or gpus or max(1, len(nodes))
        rows = [{"index": i, "name": name, "data": data} for i, name, data in items]
        dataset = (
            ray.data.from_items(rows, override_num_blocks=max(1, min(len(rows), MAX_BLOCKS)))
            .map_batches(
                parse_and_chunk,
                batch_size=1,
                batch_format="pandas",
                fn_kwargs={"model": self.model, "chunk_size": chunk_size, "limits": self.limits},
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
    """Raise :class:`InvalidArgument` naming ``address`` (``HOST:PORT`` or ``ray://HOST:PORT``) when nothing there
    accepts a TCP connection within ``timeout`` seconds."""
    host, port = _host_port(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InvalidArgument(
            f"no Ray cluster answers at {address!r} ({reason}): start one there (ray start --head), or leave "
            "--address out to start a local one",
            details={"field": "address", "address": address},
        ) from exc


def _host_port(address: str) -> tuple[str, int]:
    rest = address.split("://", 1)[1] if "://" in address else address
    host, _, port = rest.rstrip("/").rpartition(":")
    if not host:  # no port: Ray's defaults
        return rest, 10001 if address.startswith("ray://") else 6379
    try:
        return host.strip("[]"), int(port)
    except ValueError as exc:
        raise InvalidArgument(f"malformed Ray address {address!r}: use HOST:PORT or ray://HOST:PORT") from exc


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
    items: list[tuple[int, str, bytes]]


def serve_driver() -> None:
    """The driver process: reads a :class:`_DriverJob` on stdin and answers on the original stdout with
    ``("connected", gcs address)``, one ``("document", ExecutedDocument)`` per file, then ``("done", summary)``
    or ``("error", kind, code, message, details)``. Ray's own output goes to stderr."""
    from kb_core.ingest.parsing.isolation import PipeConnection

    protocol_out = os.dup(1)
    os.dup2(2, 1)
    conn = PipeConnection(0, protocol_out)
    job: _DriverJob = conn.recv()
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


class _Driver:
    """The importing process's side of :func:`serve_driver`: the child process, its results, and a watchdog."""

    def __init__(self, job: _DriverJob) -> None:
        from kb_core.ingest.parsing.isolation import PipeConnection

        self.address = job.address
        self.summary: dict[str, object] = {}
        package_root = str(Path(__file__).resolve().parents[3])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from kb_core.ingest.executors.ray_data import serve_driver; serve_driver()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            close_fds=True,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.conn = PipeConnection(self.process.stdout.fileno(), self.process.stdin.fileno())
        self.conn.send(job)

    def results(self) -> Iterator[ExecutedDocument]:
        silent_since: float | None = None
        while True:
            if not self.conn.poll(1.0):
                if self.process.poll() is not None:
                    raise self._lost()
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

    def stop(self) -> None:
        """End the driver (a finished one exits by itself; a cancelled or failed import's is killed)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10 if self.process.poll() is None and self.summary else 0.1)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()


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
