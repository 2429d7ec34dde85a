"""ZIP archives whose central directory lies about a member's sizes, for the bomb tests and the fuzzer.

A bomb that lies about its compressed size passes any ratio check made on the headers: ``claim_compressed_size``
pads the archive after the member's data and makes its directory entry claim that padding as compressed data, so
the layout stays consistent (as a careful attacker makes it) while the deflate stream inside is tiny.
"""

from __future__ import annotations

import math
import struct

_CENTRAL = b"PK\x01\x02"
_END = b"PK\x05\x06"


def central_entry(data: bytes | bytearray, member: str) -> int:
    """The offset of ``member``'s central directory entry."""
    end = data.rfind(_END)
    size, offset = struct.unpack_from("<II", data, end + 12)
    position = offset
    while position < offset + size:
        assert data[position : position + 4] == _CENTRAL
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, position + 28)
        if data[position + 46 : position + 46 + name_length] == member.encode("utf-8"):
            return position
        position += 46 + name_length + extra_length + comment_length
    raise KeyError(member)


def set_sizes(data: bytes, member: str, compressed: int | None = None, uncompressed: int | None = None) -> bytes:
    """``data`` with ``member``'s directory entry claiming other sizes (nothing else changed)."""
    out = bytearray(data)
    entry = central_entry(out, member)
    if compressed is not None:
        struct.pack_into("<I", out, entry + 20, compressed)
    if uncompressed is not None:
        struct.pack_into("<I", out, entry + 24, uncompressed)
    return bytes(out)


def claim_compressed_size(data: bytes, member: str, ratio: float) -> bytes:
    """``data`` (whose last member is ``member``) padded so that ``member`` claims ``ratio``:1 compression."""
    end = data.rfind(_END)
    directory = struct.unpack_from("<I", data, end + 16)[0]
    entry = central_entry(data, member)
    compressed, uncompressed = struct.unpack_from("<II", data, entry + 20)
    local = struct.unpack_from("<I", data, entry + 42)[0]
    name_length, extra_length = struct.unpack_from("<HH", data, local + 26)
    assert local + 30 + name_length + extra_length + compressed == directory, f"{member} must be the last member"
    pad = max(0, math.ceil(uncompressed / ratio) - compressed)
    out = bytearray(data[:directory] + bytes(pad) + data[directory:])
    struct.pack_into("<I", out, entry + pad + 20, compressed + pad)
    struct.pack_into("<I", out, end + pad + 16, directory + pad)
    return bytes(out)
