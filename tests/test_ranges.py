"""Range values read as nginx reads them, hostile ones too; both hosts are asked the same range
questions in tests/test_static_host.py."""

from __future__ import annotations

from email.utils import formatdate

import pytest

from pipeline.release.conditional import Validators
from pipeline.release.ranges import (
    ByteRange,
    RangeNotSatisfiable,
    byte_ranges,
    multipart_body,
    range_applies,
)

SIZE = 1000
FILE = Validators(etag='"0123abcd"', modified=1_795_000_000.75)


@pytest.mark.parametrize(("value", "ranges"), [
    ("bytes=0-99", [ByteRange(0, 100)]),
    ("bytes=900-", [ByteRange(900, 1000)]),
    ("bytes=-100", [ByteRange(900, 1000)]),
    ("bytes=-5000", [ByteRange(0, 1000)]),  # more than the file: from its start
    ("bytes=990-5000", [ByteRange(990, 1000)]),
    ("Bytes= 1 - 2 , 4-", [ByteRange(1, 3), ByteRange(4, 1000)]),
    ("bytes=00000000000000000000001-2", [ByteRange(1, 3)]),  # leading zeros are no size
    ("bytes=2000-,7-7", [ByteRange(7, 8)]),  # past the end: passed over
    ("bytes=10-19,0-4", [ByteRange(10, 20), ByteRange(0, 5)]),  # the order asked
    ("bytes=0-599,500-", None),  # 1100 bytes of a 1000-byte file: the whole file
    ("items=0-9", None),
    ("bytes=", None),
    ("bytes", None),
])
def test_a_range_is_read_as_nginx_reads_it(value: str, ranges: list[ByteRange] | None) -> None:
    assert byte_ranges(value, SIZE) == ranges


@pytest.mark.parametrize("value", [
    "bytes=1000-", "bytes=-0", "bytes=5-2", "bytes=0-9,", "bytes=,0-9", "bytes=abc",
    "bytes= ", "bytes=- 5", "bytes=0-9;", "bytes=\t0-9", "bytes=1-2-3",
    "bytes=\u0661-",  # an Arabic 1: not an ASCII digit
    "bytes=9223372036854775808-", "bytes=0-99999999999999999999", "bytes=" + "9" * 5000 + "-",
])
def test_a_range_nginx_cannot_serve_is_not_satisfiable(value: str) -> None:
    with pytest.raises(RangeNotSatisfiable):
        byte_ranges(value, SIZE)


def test_any_range_of_an_empty_file_is_the_whole_file() -> None:
    for value in ("bytes=0-", "bytes=-5", "bytes=0-0", "bytes=0-,junk"):
        assert byte_ranges(value, 0) is None, value
    with pytest.raises(RangeNotSatisfiable):
        byte_ranges("bytes=5-", 0)


@pytest.mark.parametrize(("if_range", "applies"), [
    (None, True),
    ('"0123abcd"', True),
    (formatdate(1_795_000_000, usegmt=True), True),  # to the second
    ('W/"0123abcd"', False),  # a weak tag never names these very bytes
    ('"other"', False),
    (formatdate(1_795_000_001, usegmt=True), False),  # a date other than Last-Modified
    (formatdate(1_794_999_999, usegmt=True), False),
    ("yesterday", False),
    ("", False),
])
def test_if_range_names_the_file_as_it_is(if_range: str | None, applies: bool) -> None:
    assert range_applies(if_range, FILE) is applies


def test_a_multipart_body_is_laid_out_as_nginx_lays_it_out() -> None:
    data = bytes(range(100))
    kind, body = multipart_body(data, [ByteRange(10, 12), ByteRange(0, 1)],
                                "application/json; charset=utf-8")
    boundary = kind.removeprefix("multipart/byteranges; boundary=")
    assert len(boundary) == 20 and boundary.isdigit()
    assert body == (
        f"\r\n--{boundary}\r\nContent-Type: application/json; charset=utf-8\r\n"
        f"Content-Range: bytes 10-11/100\r\n\r\n".encode() + data[10:12]
        + f"\r\n--{boundary}\r\nContent-Type: application/json; charset=utf-8\r\n"
          f"Content-Range: bytes 0-0/100\r\n\r\n".encode() + data[0:1]
        + f"\r\n--{boundary}--\r\n".encode())
