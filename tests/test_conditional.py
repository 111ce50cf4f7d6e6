"""Conditional requests decided as RFC 9110 §13 says, on hostile header values too; the
hosts that apply them are driven in tests/test_static_host.py."""

from __future__ import annotations

import hashlib
import os
from email.utils import formatdate
from pathlib import Path

import pytest

from pipeline.release.conditional import (
    EtagCache,
    Validators,
    content_etag,
    etag_matches,
    http_date,
    not_modified,
    precondition_failed,
)
from pipeline.release.serve import accepts_gzip

FILE = Validators(etag='"0123abcd"', modified=1_795_000_000.75)
AT = formatdate(1_795_000_000, usegmt=True)


def test_the_etag_is_the_md5_of_the_bytes_in_quotes() -> None:
    data = b'{"apis":[]}\n'
    assert content_etag(data) == f'"{hashlib.md5(data).hexdigest()}"'
    assert content_etag(data) != content_etag(data + b" ")
    assert FILE.headers() == {"ETag": '"0123abcd"', "Last-Modified": AT}
    assert FILE.headers(compressed=True)["ETag"] == 'W/"0123abcd"'


@pytest.mark.parametrize(("sent", "matches"), [
    ('"0123abcd"', True),
    ('W/"0123abcd"', True),
    ('"x", W/"0123abcd" , "y"', True),
    ("*", True),
    (" * ", True),
    ('"0123abc"', False),
    ('"0123abcd-gzip"', False),
    ("0123abcd", False),  # not quoted: no entity tag
    ("", False),
    ('"', False),
    ('W/"', False),
    ("\x00\"0123\"", False),
])
def test_if_none_match_compares_weakly(sent: str, matches: bool) -> None:
    assert etag_matches(sent, FILE.etag) is matches
    assert etag_matches(sent, f"W/{FILE.etag}") is matches


def test_if_none_match_decides_whenever_it_is_sent() -> None:
    assert not_modified(FILE.etag, formatdate(0, usegmt=True), FILE)
    assert not not_modified('"older"', formatdate(2_000_000_000, usegmt=True), FILE)
    assert not not_modified('"older"', AT, FILE)


@pytest.mark.parametrize(("since", "unchanged"), [
    (AT, True),  # the second the file was written: sub-second parts do not count
    (formatdate(1_795_000_001, usegmt=True), True),
    (formatdate(1_794_999_999, usegmt=True), False),
    ("Sun, 06 Nov 1994 08:49:37 GMT", False),
    ("Sunday, 06-Nov-94 08:49:37 GMT", False),
    ("yesterday", False),
    ("", False),
    ("Mon, 99 Foo 2026 99:99:99 GMT", False),
    ("Mon, 01 Jan 99999999 00:00:00 GMT", False),
    ("\udcff", False),
])
def test_if_modified_since_without_if_none_match(since: str, unchanged: bool) -> None:
    assert not_modified(None, since, FILE) is unchanged


@pytest.mark.parametrize(("if_match", "since", "failed"), [
    ('"0123abcd"', None, False),
    ('"x", "0123abcd"', None, False),
    ("*", None, False),
    ('W/"0123abcd"', None, True),  # strong comparison: a weak tag never matches
    ('"0123abc"', None, True),
    ("0123abcd", None, True),  # not quoted: no entity tag
    ("", None, True),
    ('"0123abcd"', formatdate(0, usegmt=True), False),  # If-Match decides alone
    (None, AT, False),
    (None, formatdate(1_794_999_999, usegmt=True), True),
    (None, "yesterday", True),  # no date: not taken as held, as nginx answers
    (None, "", True),
    ('"0123abcd"', "yesterday", False),  # If-Match decides alone
    (None, None, False),
])
def test_a_precondition_fails_when_the_file_is_not_the_one_held(
    if_match: str | None, since: str | None, failed: bool
) -> None:
    assert precondition_failed(if_match, since, FILE) is failed


def test_no_condition_is_never_not_modified() -> None:
    assert not not_modified(None, None, FILE)


def test_an_http_date_is_read_in_its_three_forms_or_refused() -> None:
    assert http_date(AT) == 1_795_000_000
    for form in ("Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT",
                 "Sun Nov  6 08:49:37 1994"):
        assert http_date(form) == 784111777, form
    for junk in ("2026-11-21T03:00:00Z", "1795000000", "Sun, 06 Nov", "\x00"):
        assert http_date(junk) is None, junk


@pytest.mark.parametrize(("header", "gzip"), [
    ("gzip", True),
    ("gzip, deflate, br, zstd", True),
    ("br;q=1.0, GZIP;q=0.5", True),
    ("x-gzip", True),
    ("gzip;q=0", False),
    ("gzip;q=0.000", False),
    ("gzip;q=nonsense", False),
    ("deflate, br", False),
    ("identity", False),
    ("", False),
    ("gzipped", False),
])
def test_gzip_is_used_where_the_client_takes_it(header: str, gzip: bool) -> None:
    assert accepts_gzip(header) is gzip


def test_each_version_of_a_file_is_hashed_once(tmp_path: Path) -> None:
    cache = EtagCache(limit=2)
    first = tmp_path / "a.json"
    first.write_bytes(b"one")
    stat = os.stat(first)
    assert cache.get(stat) is None
    cache.remember(stat, content_etag(b"one"))
    assert cache.get(os.stat(first)) == content_etag(b"one")
    replaced = tmp_path / "a.json.new"
    replaced.write_bytes(b"two")
    replaced.replace(first)  # a new inode: a new version, whatever its time and size
    assert cache.get(os.stat(first)) is None
    for name in ("b", "c"):
        other = tmp_path / name
        other.write_bytes(name.encode())
        cache.remember(os.stat(other), content_etag(name.encode()))
    assert cache.get(stat) is None  # the cache stays within its limit
