"""Reading a ZIP member while counting what it really inflates to: its headers are never trusted.

A member's directory entry declares its compressed and uncompressed sizes, and ratio checks on those numbers are
what a bomb defeats: an entry that claims a larger compressed size than its data has passes a 200:1 check while its
deflate stream expands 1000-fold. :func:`iter_member` therefore reads the member's data itself (after the local
header, which must match the directory) and inflates it in blocks, counting the compressed bytes the decompressor
actually consumed and the bytes it produced; it stops, with :class:`UnsafeMember`, as soon as the output passes
the declared size or the byte limit, or grows faster than the ratio limit allows (past a floor, since small files
of spaces compress well). At the end the output must be exactly the declared size with the declared CRC-32.
Stored and deflated members are read; other methods and encrypted members are refused.
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

__all__ = ["CentralDirectory", "InflateLimits", "UnsafeMember", "central_directory", "iter_member"]

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_LOCAL_SIGNATURE = b"PK\x03\x04"
_INPUT_BLOCK = 64 * 1024  # compressed bytes fed at a time: the ratio is checked at this grain


_END = struct.Struct("<4s4H2LH")  # end of central directory record
_END_SIGNATURE = b"PK\x05\x06"
_END64_LOCATOR = struct.Struct("<4sLQL")
_END64_LOCATOR_SIGNATURE = b"PK\x06\x07"
_END64 = struct.Struct("<4sQ2H2L4Q")
_END64_SIGNATURE = b"PK\x06\x06"
_MAX_COMMENT = 0xFFFF


@dataclass(frozen=True)
class CentralDirectory:
    """What an archive's end record declares: how many members, and the size of the directory that lists them."""

    members: int
    size: int


def central_directory(handle: IO[bytes]) -> CentralDirectory | None:
    """The member count and directory size the archive open as ``handle`` declares (ZIP64 included), read from its
    last 64 KiB: a cost that does not grow with the archive, so limits can be applied before ``zipfile`` parses the
    directory (work in proportion to it). None when there is no end record (not a ZIP file)."""
    end = handle.seek(0, 2)
    start = max(0, end - _END.size - _MAX_COMMENT)
    handle.seek(start)
    tail = handle.read(end - start)
    at = tail.rfind(_END_SIGNATURE)
    if at < 0 or len(tail) - at < _END.size:
        return None
    _, _, _, _, members, size, _, _ = _END.unpack_from(tail, at)
    if members == 0xFFFF or size == 0xFFFFFFFF:
        locator_at = start + at - _END64_LOCATOR.size
        if locator_at < 0:
            return CentralDirectory(members, size)
        handle.seek(locator_at)
        signature, _, offset, _ = _END64_LOCATOR.unpack(handle.read(_END64_LOCATOR.size))
        if signature != _END64_LOCATOR_SIGNATURE or offset > end - _END64.size:
            return CentralDirectory(members, size)
        handle.seek(offset)
        record = handle.read(_END64.size)
        if len(record) == _END64.size and record[:4] == _END64_SIGNATURE:
            _, _, _, _, _, _, _, members, size, _ = _END64.unpack(record)
    return CentralDirectory(members, size)


@dataclass(frozen=True)
class InflateLimits:
    """What one member may inflate to: ``max_bytes`` in all, and at most ``max_ratio`` times the compressed bytes
    consumed once past ``ratio_floor`` bytes of output."""

    max_bytes: int
    max_ratio: float
    ratio_floor: int


class UnsafeMember(Exception):
    """A member refused while reading it. ``kind``: ``too_large`` (declares more than the byte limit), ``bomb``
    (inflates faster than the ratio limit or past its declared size) or ``corrupt``."""

    def __init__(self, reason: str, kind: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


def iter_member(
    handle: IO[bytes], info: zipfile.ZipInfo, limits: InflateLimits, block: int = 1 << 20
) -> Iterator[bytes]:
    """The inflated bytes of member ``info`` of the ZIP archive open as ``handle``, in blocks of at most ``block``
    bytes. Raises :class:`UnsafeMember` the moment the data breaks a limit or its declared size."""
    if info.flag_bits & 0x1:
        raise UnsafeMember("it is encrypted", "corrupt")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise UnsafeMember(f"it uses compression method {info.compress_type}; only stored and deflated", "corrupt")
    if info.file_size > limits.max_bytes:
        raise UnsafeMember(
            f"it declares {info.file_size:,} bytes; at most {limits.max_bytes:,} are accepted", "too_large"
        )
    handle.seek(_data_offset(handle, info))
    if info.compress_type == zipfile.ZIP_STORED:
        yield from _stored(handle, info)
        return
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    crc = 0
    consumed = produced = 0  # compressed bytes the inflater used; bytes it produced
    left = info.compress_size  # never read past what the entry claims (nor past the end of the file)
    pending = b""
    try:
        while not inflater.eof:
            if not pending and left > 0:
                pending = handle.read(min(_INPUT_BLOCK, left))
                left = left - len(pending) if pending else 0  # the file may end before the claimed size
            before = len(pending)
            out = inflater.decompress(pending, block)
            pending = inflater.unconsumed_tail
            consumed += before - len(pending) - (len(inflater.unused_data) if inflater.eof else 0)
            if not out and not pending and left <= 0 and not inflater.eof:
                raise UnsafeMember("its compressed data ends early (truncated or damaged)", "corrupt")
            produced += len(out)
            if produced > info.file_size:  # which is within limits.max_bytes
                raise UnsafeMember(f"it inflates past its declared {info.file_size:,} bytes", "bomb")
            if produced > limits.ratio_floor and produced > limits.max_ratio * max(consumed, 1):
                raise UnsafeMember(
                    f"it inflates more than {limits.max_ratio:g}-fold ({consumed:,} compressed bytes gave "
                    f"{produced:,}); its headers understate that (decompression bomb?)",
                    "bomb",
                )
            if out:
                crc = zlib.crc32(out, crc)
                yield out
    except zlib.error as exc:
        raise UnsafeMember(f"its deflate data is damaged ({exc})", "corrupt") from None
    _check_end(info, produced, crc)


def _data_offset(handle: IO[bytes], info: zipfile.ZipInfo) -> int:
    handle.seek(info.header_offset)
    header = handle.read(_LOCAL_HEADER.size)
    if len(header) != _LOCAL_HEADER.size:
        raise UnsafeMember("its local header is cut off", "corrupt")
    signature, *_, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    if signature != _LOCAL_SIGNATURE:
        raise UnsafeMember("its local header is missing (bad offset)", "corrupt")
    name = handle.read(name_length)
    expected = info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437", "replace")
    if name != expected:
        raise UnsafeMember("its local header names another file than the directory does", "corrupt")
    return info.header_offset + _LOCAL_HEADER.size + name_length + extra_length


def _stored(handle: IO[bytes], info: zipfile.ZipInfo) -> Iterator[bytes]:
    if info.compress_size != info.file_size:
        raise UnsafeMember("it is stored, yet declares different compressed and uncompressed sizes", "corrupt")
    crc = produced = 0
    while produced < info.file_size:
        data = handle.read(min(1 << 20, info.file_size - produced))
        if not data:
            raise UnsafeMember("its data ends early (truncated)", "corrupt")
        produced += len(data)
        crc = zlib.crc32(data, crc)
        yield data
    _check_end(info, produced, crc)


def _check_end(info: zipfile.ZipInfo, produced: int, crc: int) -> None:
    if produced != info.file_size:
        raise UnsafeMember(f"it holds {produced:,} bytes but declares {info.file_size:,}", "corrupt")
    if crc != info.CRC:
        raise UnsafeMember("its CRC-32 does not match its data (damaged or altered)", "corrupt")
