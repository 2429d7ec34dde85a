"""kb_core.base.safe_zip: a member is inflated counting what it really produces, whatever its headers claim."""

from __future__ import annotations

import io
import zipfile

import pytest

from kb_core.base.safe_zip import InflateLimits, UnsafeMember, iter_member
from tests.lying_zip import claim_compressed_size, set_sizes

LIMITS = InflateLimits(max_bytes=1 << 30, max_ratio=200, ratio_floor=1 << 20)


def archive(*members: tuple[str, bytes], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as out:
        for name, data in members:
            out.writestr(name, data)
    return buffer.getvalue()


def read_all(data: bytes, name: str, limits: InflateLimits = LIMITS) -> tuple[bytes, int]:
    """(the member's bytes, or b"" when refused; the bytes produced before a refusal)."""
    handle = io.BytesIO(data)
    info = zipfile.ZipFile(handle).getinfo(name)
    produced = 0
    blocks = []
    try:
        for block in iter_member(handle, info, limits):
            produced += len(block)
            blocks.append(block)
    except UnsafeMember as exc:
        raise AssertionError((exc.kind, exc.reason, produced)) from None
    return b"".join(blocks), produced


@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
def test_honest_members_read_back_exactly(method: int) -> None:
    text = "".join(f"{i} 数据 and data {i * 7919 % 10007}\n" for i in range(100_000)).encode()
    data = archive(("a.txt", text), ("empty", b""), method=method)
    assert read_all(data, "a.txt")[0] == text and read_all(data, "empty")[0] == b""


def test_a_bomb_that_lies_about_its_compressed_size_stops_near_the_floor() -> None:
    data = claim_compressed_size(archive(("bomb", bytes(256 << 20))), "bomb", 150)
    info = zipfile.ZipFile(io.BytesIO(data)).getinfo("bomb")
    assert info.file_size <= 150 * info.compress_size  # the headers look harmless
    with pytest.raises(AssertionError) as refused:
        read_all(data, "bomb")
    kind, reason, produced = refused.value.args[0]
    assert kind == "bomb" and "200-fold" in reason
    assert produced <= 3 << 20  # stopped within a few blocks of the 1 MB floor, not at 256 MB


@pytest.mark.parametrize(
    ("lie", "fragment"),
    [
        ({"uncompressed": 10}, "inflates past its declared 10 bytes"),
        ({"uncompressed": 5_000_000}, "holds 1,000,000 bytes but declares 5,000,000"),
        ({"compressed": 10}, "ends early"),
        ({"compressed": 0xFFFFFFF0}, ""),  # reads only what the stream needs: the data is intact
    ],
)
def test_sizes_that_lie_are_caught_by_the_data(lie: dict[str, int], fragment: str) -> None:
    text = (bytes(range(256)) * 3907)[:1_000_000]  # 1,000,000 bytes
    data = set_sizes(archive(("m", text)), "m", **lie)
    if not fragment:
        assert read_all(data, "m")[0] == text
        return
    with pytest.raises(AssertionError) as refused:
        read_all(data, "m")
    assert fragment in refused.value.args[0][1]


def test_a_stored_member_must_declare_equal_sizes_and_its_crc() -> None:
    data = archive(("m", b"hello world"), method=zipfile.ZIP_STORED)
    with pytest.raises(AssertionError, match="different compressed and uncompressed"):
        read_all(set_sizes(data, "m", compressed=5), "m")
    damaged = data.replace(b"hello world", b"hellO world", 1)
    with pytest.raises(AssertionError, match="CRC-32"):
        read_all(damaged, "m")


def test_the_byte_limit_is_checked_before_anything_is_read() -> None:
    data = archive(("m", b"x" * 1000))
    with pytest.raises(AssertionError) as refused:
        read_all(data, "m", InflateLimits(max_bytes=999, max_ratio=200, ratio_floor=0))
    assert refused.value.args[0][:1] == ("too_large",) and refused.value.args[0][2] == 0
