"""Range requests (RFC 9110 §14) as nginx answers them for a published file, so that a consumer
resuming the download of a large `api/apis.json` gets the same answer from either host.

A range applies to the file's bytes as they are, never to a gzipped answer (nginx sends that
whole, and names no `Accept-Ranges`). Read as nginx reads them: only `bytes=` ranges; one range
is answered `206` with `Content-Range`, several with a `multipart/byteranges` body in the order
asked; ranges that add up to more than the file (overlapping ones), or any range of an empty
file, get the whole file; a range that starts past the end is passed over, and when none is
left, or the value is malformed, the answer is `416`.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

from pipeline.release.conditional import Validators, http_date

# One range of a `bytes=` value, spaces as nginx skips them: `first-[last]` or `-suffix`.
_RANGE = re.compile(r" *(?:(?P<first>[0-9]+) *- *(?P<last>[0-9]*)|-(?P<suffix>[0-9]+)) *")
_LARGEST_OFFSET = 2**63 - 1  # nginx's off_t: a larger number is no range


class RangeNotSatisfiable(ValueError):
    """No range of the request can be served: answered `416` with `Content-Range: bytes */size`."""


@dataclass(frozen=True)
class ByteRange:
    """Bytes `start` up to, not including, `end` of a file."""

    start: int
    end: int

    def content_range(self, size: int) -> str:
        return f"bytes {self.start}-{self.end - 1}/{size}"


def _offset(digits: str) -> int:
    number = digits.lstrip("0")
    if len(number) > 19 or int(number or "0") > _LARGEST_OFFSET:
        raise RangeNotSatisfiable(f"{digits}: too large an offset")
    return int(number or "0")


def byte_ranges(value: str, size: int) -> list[ByteRange] | None:
    """The ranges a `Range` value asks of a file of `size` bytes, or None where the whole file
    is the answer (no `bytes=` ranges, an empty file, ranges adding up to more than the file).
    Raises RangeNotSatisfiable for a malformed value or one with no range inside the file."""
    if len(value) < 7 or value[:6].lower() != "bytes=":
        return None
    ranges: list[ByteRange] = []
    for item in value[6:].split(","):
        found = _RANGE.fullmatch(item)
        if found is None:
            raise RangeNotSatisfiable(f"{value!r}: not a byte range")
        if found["suffix"] is not None:
            start, end = max(size - _offset(found["suffix"]), 0), size
        else:
            start = _offset(found["first"])
            end = min(_offset(found["last"]) + 1, size) if found["last"] else size
        if start < end:
            ranges.append(ByteRange(start, end))
        elif start == 0:
            return None  # an empty file: nothing to cut, the whole of it
    if not ranges:
        raise RangeNotSatisfiable(f"{value!r}: no range within {size} bytes")
    if sum(part.end - part.start for part in ranges) > size:
        return None
    return ranges


def range_applies(if_range: str | None, file: Validators) -> bool:
    """True when the ranges are to be served (§13.1.5): without If-Range, or when it names the
    file as it is now, by its strong ETag exactly or by its Last-Modified date to the second;
    otherwise the client's part belongs to another version and the whole file is sent."""
    if if_range is None:
        return True
    if len(if_range) >= 2 and if_range.endswith('"'):
        return if_range == file.etag
    return http_date(if_range) == int(file.modified)


def multipart_body(data: bytes, ranges: list[ByteRange], content_type: str
                   ) -> tuple[str, bytes]:
    """The `multipart/byteranges` Content-Type and body of several ranges of `data`, laid out
    as nginx lays them out (each part typed as the file and naming its Content-Range)."""
    boundary = f"{secrets.randbelow(10**20):020d}"
    parts = [b"\r\n--%s\r\nContent-Type: %s\r\nContent-Range: %s\r\n\r\n%s" % (
        boundary.encode(), content_type.encode(), part.content_range(len(data)).encode(),
        data[part.start:part.end]) for part in ranges]
    body = b"".join(parts) + b"\r\n--%s--\r\n" % boundary.encode()
    return f"multipart/byteranges; boundary={boundary}", body
