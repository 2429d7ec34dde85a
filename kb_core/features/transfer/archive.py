"""Reading an export file's ZIP archive under limits: member names, declared sizes and ratios, the manifest, the
members' sizes and SHA-256, tables and ``.npy`` headers checked before anything is allocated
(``docs/export-format.md``). The declared sizes are only a first check: each member is inflated counting the bytes
it really produces (:mod:`kb_core.base.safe_zip`), so a member whose headers lie stops at the limit. Everything it
refuses raises ImportFormatError (INVALID_IMPORT_FILE).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import shutil
import stat
import zipfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kb_core.base.errors import ImportFormatError, InvalidArgument, StoreError
from kb_core.base.json_text import JSONLimitExceeded, parse_json_within
from kb_core.base.safe_files import UnusablePath, open_input_file
from kb_core.base.safe_zip import InflateLimits, UnsafeMember, central_directory, iter_member
from kb_core.features.transfer.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    GRAPH_PATH,
    MANIFEST_MEMBER,
    MAX_MANIFEST_DEPTH,
    MEMBER_PATH,
    NPY_VERSIONS,
    READ_BLOCK,
    TransferLimits,
)

logger = logging.getLogger(__name__)

# A directory entry's bytes at most, on average: 46 fixed, a member name of the format (under 100 characters) and
# room for extra fields; a directory larger than this per accepted member is refused before it is parsed.
MAX_DIRECTORY_ENTRY_BYTES = 1024


def refuse(message: str, **details: Any) -> ImportFormatError:
    return ImportFormatError(message, details=details)


def _check_member_name(info: zipfile.ZipInfo) -> None:
    name = info.filename
    shown = repr(name)
    if "\x00" in name or any(ord(c) < 32 for c in name):
        raise refuse(f"Member {shown} has control characters in its name; refused.", member=name)
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise refuse(f"Member {shown} has an absolute path; only relative member names are accepted.", member=name)
    if "\\" in name:
        raise refuse(f"Member {shown} uses backslashes; only '/' separated names are accepted.", member=name)
    if ".." in name.split("/"):
        raise refuse(f"Member {shown} climbs out of the archive with '..'; refused.", member=name)
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        what = {stat.S_IFLNK: "a symbolic link", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}.get(
            kind, "a special file"
        )
        raise refuse(f"Member {shown} is {what}; only regular files are accepted.", member=name)
    if info.is_dir():
        raise refuse(f"Member {shown} is a folder entry; an export file holds only files.", member=name)
    if info.flag_bits & 0x1:
        raise refuse(f"Member {shown} is encrypted; export files are never encrypted.", member=name)
    if name != MANIFEST_MEMBER and not MEMBER_PATH.match(name):
        raise refuse(
            f"Member {shown} is not part of the {FORMAT_NAME} format (expected manifest.json, kb/NNNN/seg/NNNN/… "
            "and kb/NNNN/graph/state.json).",
            member=name,
        )


def _check_sizes(infos: Sequence[zipfile.ZipInfo], limits: TransferLimits) -> int:
    if len(infos) > limits.max_members:
        raise refuse(f"The file has {len(infos)} members; at most {limits.max_members} are accepted.")
    total = 0
    for info in infos:
        if info.file_size > limits.max_member_bytes:
            raise refuse(
                f"Member {info.filename!r} declares {info.file_size} bytes uncompressed; "
                f"at most {limits.max_member_bytes} are accepted (decompression bomb?).",
                member=info.filename,
            )
        if info.file_size > limits.ratio_floor_bytes and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise refuse(
                f"Member {info.filename!r} expands {info.file_size / max(info.compress_size, 1):.0f}-fold "
                f"({info.compress_size} → {info.file_size} bytes); at most {limits.max_ratio:g}-fold is accepted "
                "(decompression bomb?).",
                member=info.filename,
            )
        if GRAPH_PATH.match(info.filename) and info.file_size > limits.max_graph_bytes:
            raise refuse(
                f"Member {info.filename!r} declares a {info.file_size}-byte graph; at most {limits.max_graph_bytes} "
                "bytes are accepted.",
                member=info.filename,
            )
        total += info.file_size
    if total > limits.max_total_bytes:
        raise refuse(
            f"The file declares {total} bytes uncompressed in all; at most {limits.max_total_bytes} are accepted."
        )
    return total


def _extract(
    handle: IO[bytes], info: zipfile.ZipInfo, target: Path | None, limits: InflateLimits
) -> tuple[str, int, bytes | None]:
    """Stream one member, counting the bytes really inflated (:mod:`kb_core.base.safe_zip`: never past its declared
    size, ``limits.max_bytes`` or the ratio limit, whatever its headers claim); returns (sha256, size, bytes if target
    is None)."""
    digest = hashlib.sha256()
    size = 0
    kept = io.BytesIO() if target is None else None
    out = open(target, "xb") if target is not None else None  # noqa: SIM115
    try:
        for block in iter_member(handle, info, limits, READ_BLOCK):
            size += len(block)
            digest.update(block)
            (out or kept).write(block)  # type: ignore[union-attr]
    except UnsafeMember as exc:
        what = "the file is corrupt or was altered" if exc.kind == "corrupt" else "refused (decompression bomb?)"
        raise refuse(f"Member {info.filename!r}: {exc.reason}; {what}.", member=info.filename) from None
    except OSError as exc:
        raise refuse(f"Member {info.filename!r} cannot be read ({exc.strerror or exc}).") from exc
    finally:
        if out is not None:
            out.close()
    return digest.hexdigest(), size, kept.getvalue() if kept is not None else None


def _member_limits(info: zipfile.ZipInfo, limits: TransferLimits) -> InflateLimits:
    most = limits.max_member_bytes
    if info.filename == MANIFEST_MEMBER:
        most = limits.max_manifest_bytes
    elif GRAPH_PATH.match(info.filename):
        most = limits.max_graph_bytes
    return InflateLimits(max_bytes=most, max_ratio=limits.max_ratio, ratio_floor=limits.ratio_floor_bytes)


@dataclass
class Package:
    manifest: dict[str, Any]
    members: dict[str, Path]  # member name → extracted file
    limits: TransferLimits


def _read_manifest(data: bytes, limits: TransferLimits) -> dict[str, Any]:
    try:
        manifest = parse_json_within(
            data.decode("utf-8"), max_values=limits.max_manifest_values, max_depth=MAX_MANIFEST_DEPTH
        )
    except JSONLimitExceeded as exc:  # measured before parsing: nothing was built
        raise refuse(f"manifest.json is refused: {exc}; this is not an export file this program wrote.") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise refuse(f"manifest.json is not valid UTF-8 JSON: {exc}.") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise refuse(f"This is not a {FORMAT_NAME} file (manifest format is {found!r}).")
    version = manifest.get("format_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise refuse(f"format_version {version!r} is not valid; this program reads version {FORMAT_VERSION}.")
    if version > FORMAT_VERSION:
        raise refuse(
            f"The file has format_version {version}, newer than this program understands ({FORMAT_VERSION}); "
            "upgrade KB Workbench to import it.",
            format_version=version,
        )
    if not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("knowledge_bases"), list):
        raise refuse("manifest.json lacks its 'files' map or 'knowledge_bases' list.")
    for name, entry in manifest["files"].items():
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("sha256"), str)
            or not re.fullmatch(r"[0-9a-f]{64}", entry["sha256"])
            or isinstance(entry.get("size"), bool)
            or not isinstance(entry.get("size"), int)
            or entry["size"] < 0
        ):
            raise refuse(f"manifest.json entry for {name!r} needs a sha256 (64 hex digits) and a size.")
    return manifest


def open_package(
    path: Path, staging: Path, limits: TransferLimits, allowed_dirs: Sequence[Path] | None = None
) -> Package:
    # Opened once (confined where the session is); the archive is read from that open file only.
    try:
        with open_input_file(path, allowed_dirs) as opened:
            handle = opened.reader()
    except UnusablePath as exc:
        raise InvalidArgument(f"source_db_path {str(path)!r} {exc.reason}; give an export file.") from None
    with handle:
        return _read_package(handle, path, staging, limits)


def _read_package(handle: IO[bytes], path: Path, staging: Path, limits: TransferLimits) -> Package:
    # The member limit first, from the end record: zipfile's parse of the directory grows with the member count.
    try:
        declared = central_directory(handle)
    except OSError as exc:
        raise refuse(f"{path.name} cannot be read: {exc.strerror or exc}.") from exc
    if declared is not None:
        if declared.members > limits.max_members:
            raise refuse(f"The file has {declared.members} members; at most {limits.max_members} are accepted.")
        if declared.size > limits.max_members * MAX_DIRECTORY_ENTRY_BYTES:
            raise refuse(
                f"The file's member directory is {declared.size:,} bytes; at most "
                f"{limits.max_members * MAX_DIRECTORY_ENTRY_BYTES:,} are accepted."
            )
    handle.seek(0)
    try:
        archive = zipfile.ZipFile(handle)
    except zipfile.BadZipFile as exc:
        raise refuse(
            f"{path.name} is not a {FORMAT_NAME} file, or it is truncated: it is not a readable ZIP archive ({exc})."
        ) from exc
    except OSError as exc:
        raise refuse(f"{path.name} cannot be read: {exc.strerror or exc}.") from exc
    with archive:
        infos = archive.infolist()
        names = [i.filename for i in infos]
        duplicates = sorted(n for n, count in Counter(names).items() if count > 1)  # linear: one count per name
        if duplicates:
            raise refuse(f"Member name(s) {duplicates[:5]} occur more than once; refused.")
        for info in infos:
            _check_member_name(info)
        total = _check_sizes(infos, limits)
        by_name = {i.filename: i for i in infos}
        if MANIFEST_MEMBER not in by_name:
            raise refuse(f"{path.name} has no {MANIFEST_MEMBER}: it is not a {FORMAT_NAME} file.")
        manifest_info = by_name[MANIFEST_MEMBER]
        if manifest_info.file_size > limits.max_manifest_bytes:
            raise refuse(f"manifest.json declares {manifest_info.file_size} bytes; refused.")
        _, _, data = _extract(handle, manifest_info, None, _member_limits(manifest_info, limits))
        manifest = _read_manifest(data or b"", limits)
        listed = set(manifest["files"])
        present = set(by_name) - {MANIFEST_MEMBER}
        if listed - present:
            raise refuse(f"Member(s) listed in the manifest are missing: {sorted(listed - present)[:5]}.")
        if present - listed:
            raise refuse(f"Member(s) not listed in the manifest: {sorted(present - listed)[:5]}.")
        free = shutil.disk_usage(staging.parent).free
        if total * 2 > free:
            raise StoreError(
                f"Importing needs about {2 * total} bytes of free space in the home; {free} are free.",
                code="INSUFFICIENT_SPACE",
            )
        members: dict[str, Path] = {}
        raw = staging / "raw"
        raw.mkdir()
        for number, name in enumerate(sorted(listed)):
            info = by_name[name]
            expected = manifest["files"][name]
            if info.file_size != expected["size"]:
                raise refuse(
                    f"Member {name!r} is {info.file_size} bytes but the manifest says {expected['size']}; refused.",
                    member=name,
                )
            target = raw / f"{number:08d}"
            digest, _, _ = _extract(handle, info, target, _member_limits(info, limits))
            if digest != expected["sha256"]:
                raise refuse(
                    f"Member {name!r} fails its checksum (sha256 {digest[:12]}…, manifest says "
                    f"{expected['sha256'][:12]}…): the file is damaged or was altered.",
                    member=name,
                )
            members[name] = target
    return Package(manifest, members, limits)




def read_table(path: Path, schema: pa.Schema, what: str, optional: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The rows of a member table in ``schema``; a column in ``optional`` (added to the format later) may be
    missing, and reads as null."""
    try:
        table = pq.read_table(path)
        missing = [n for n in schema.names if n not in table.column_names]
        if [n for n in missing if n not in optional]:
            raise refuse(f"{what} lacks the column(s) {[n for n in missing if n not in optional]}.")
        for name in missing:
            table = table.append_column(name, pa.nulls(table.num_rows, schema.field(name).type))
        return table.select(schema.names).cast(schema).to_pylist()
    except ImportFormatError:
        raise
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise refuse(f"{what} is not a readable table of the expected schema: {exc}.") from exc


def read_vectors(path: Path, rows: int, what: str) -> np.ndarray:
    """Read a vectors.npy member after checking its header against the member's real size (never allocating
    what a header merely claims)."""
    from numpy.lib import format as npy

    try:
        with open(path, "rb") as handle:
            version = npy.read_magic(handle)
            if version not in NPY_VERSIONS:
                raise refuse(f"{what} is a .npy file of version {version[0]}.{version[1]}; 1.0 and 2.0 are accepted.")
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, fortran_order, dtype = read_header(handle)
            data_bytes = os.fstat(handle.fileno()).st_size - handle.tell()
            if len(shape) != 2 or dtype != np.dtype("<f4") or fortran_order or not 1 <= shape[1] <= 65536:
                order = " in Fortran order" if fortran_order else ""
                raise refuse(
                    f"{what} must be a 2-D little-endian float32 array in C order with 1 to 65536 columns, got "
                    f"{dtype} of shape {shape}{order}."
                )
            claimed = shape[0] * shape[1] * dtype.itemsize
            if claimed != data_bytes:
                raise refuse(
                    f"{what}: its header claims shape {shape} ({claimed} bytes) but the member holds {data_bytes} "
                    "bytes of data; refused."
                )
            if shape[0] != rows:
                raise refuse(f"{what} has {shape[0]} vectors for {rows} chunks.")
            vectors = np.fromfile(handle, dtype=dtype, count=shape[0] * shape[1]).reshape(shape)
    except ImportFormatError:
        raise
    except (OSError, ValueError, EOFError) as exc:
        raise refuse(f"{what} is not a readable .npy array: {exc}.") from exc
    if not np.isfinite(vectors).all():
        raise refuse(f"{what} contains NaN or infinite values.")
    norms = np.linalg.norm(vectors, axis=1)
    if rows and not ((np.abs(norms - 1.0) <= 1e-3) | (norms == 0.0)).all():
        raise refuse(f"{what} holds vectors that are not L2-normalised.")
    return vectors
