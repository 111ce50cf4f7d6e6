"""Conditional requests (RFC 9110 §13): the validators of a published file, and whether a GET
or HEAD may be answered `304 Not Modified`.

The ETag is strong and comes from the file's bytes: the MD5 of its content in quotes, so the
same bytes have the same tag on every machine and in every kept copy, and it is the ETag S3
gives a file uploaded in one part. A gzip-compressed answer is another representation of the
file, so it carries the weak form `W/"…"`, as nginx does; If-None-Match compares weakly, so
either form revalidates. A 304 names the strong form whatever the request takes, as nginx's
does (its gzip filter looks at 200s alone), so both hosts answer a revalidation alike.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from datetime import UTC
from email.utils import formatdate, parsedate_to_datetime

_OPAQUE_TAG = re.compile(r'(?:W/)?("[^"]*")')


def content_etag(data: bytes) -> str:
    """The strong ETag of a file's bytes."""
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


@dataclass(frozen=True)
class Validators:
    """A file's strong ETag and its modification time (seconds since the epoch)."""

    etag: str
    modified: float

    def headers(self, compressed: bool = False) -> dict[str, str]:
        etag = f"W/{self.etag}" if compressed else self.etag
        return {"ETag": etag, "Last-Modified": formatdate(int(self.modified), usegmt=True)}


def etag_matches(if_none_match: str, etag: str) -> bool:
    """Weak comparison (§13.1.2) of If-None-Match with a file's ETag: `W/"x"` matches `"x"`,
    and `*` matches any file."""
    if if_none_match.strip() == "*":
        return True
    return etag.removeprefix("W/") in _OPAQUE_TAG.findall(if_none_match)


_ANY_TAG = re.compile(r'(W/)?("[^"]*")')


def strong_match(if_match: str, etag: str) -> bool:
    """Strong comparison (§13.1.1) of If-Match with a file's ETag: a weak tag never matches,
    since the client asks for these very bytes; `*` matches any file."""
    if if_match.strip() == "*":
        return True
    return any(not weak and tag == etag for weak, tag in _ANY_TAG.findall(if_match))


def http_date(text: str) -> float | None:
    """Seconds since the epoch of an HTTP-date in any of its three forms (§5.6.7; the
    asctime form names no zone and is GMT), or None for anything else."""
    try:
        moment = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def not_modified(if_none_match: str | None, if_modified_since: str | None,
                 file: Validators) -> bool:
    """True when the client's copy is current (§13.2.2): If-None-Match decides whenever it is
    sent; If-Modified-Since only without it, and only when it is a valid date."""
    if if_none_match is not None:
        return etag_matches(if_none_match, file.etag)
    if if_modified_since is not None:
        since = http_date(if_modified_since)
        return since is not None and int(file.modified) <= since
    return False


def precondition_failed(if_match: str | None, if_unmodified_since: str | None,
                        file: Validators) -> bool:
    """True when the client's condition on the file it holds fails, to be answered `412`
    (§13.2.2), so that a client never takes a newer file for the one it had: If-Match decides
    whenever it is sent; If-Unmodified-Since only without it. An If-Unmodified-Since that is
    no date fails too, as nginx answers it (§13.1.4 would have it ignored): a condition the
    host cannot check is not taken as held."""
    if if_match is not None:
        return not strong_match(if_match, file.etag)
    if if_unmodified_since is not None:
        since = http_date(if_unmodified_since)
        return since is None or int(file.modified) > since
    return False


class EtagCache:
    """ETags of files by version (device, inode, size, modification time): each version is
    hashed once, and a revalidated file is not read again. Published files are replaced,
    never rewritten in place, so a new version is a new key."""

    def __init__(self, limit: int = 65536) -> None:
        self._known: dict[tuple[int, int, int, int], str] = {}
        self._limit = limit

    @staticmethod
    def key(stat: os.stat_result) -> tuple[int, int, int, int]:
        return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns

    def get(self, stat: os.stat_result) -> str | None:
        return self._known.get(self.key(stat))

    def remember(self, stat: os.stat_result, etag: str) -> str:
        if len(self._known) >= self._limit:
            self._known.clear()
        self._known[self.key(stat)] = etag
        return etag
