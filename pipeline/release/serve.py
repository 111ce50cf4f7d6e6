"""`apidir serve`: preview a published release locally, as its static host would serve it.

The headers and the JSON 404 come from the release's own `_headers` and `_redirects`
files (Netlify semantics: a redirect applies only where no file matches), so the preview
shows what those files say; without them, the rules `pipeline.release.hosting` would write for
the folder apply.
HTTP as a good static host does it: strong ETags from the file's bytes and Last-Modified with
304s and 412s (`pipeline.release.conditional`), byte ranges as nginx answers them
(`pipeline.release.ranges`), HEAD like GET without the body, gzip where the client takes it,
and CORS preflights (OPTIONS) answered 204.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import mimetypes
import os
import re
import signal
from collections.abc import Callable, Sequence
from contextlib import suppress
from http import HTTPStatus
from pathlib import Path
from typing import TypeVar
from urllib.parse import unquote

from aiohttp import web
from aiohttp.http import HttpVersion
from aiohttp.typedefs import Handler
from aiohttp.web_response import ContentCoding

from pipeline.release.conditional import (
    EtagCache,
    Validators,
    content_etag,
    not_modified,
    precondition_failed,
)
from pipeline.release.hosting import (
    ALLOWED_METHODS,
    HEADERS_FILE,
    LIVE_CACHE,
    REDIRECT_RULES,
    REDIRECTS_FILE,
    RENAMED_MAP,
    HeaderRule,
    headers_for,
    parse_headers_file,
    parse_redirects_file,
    release_header_rules,
)
from pipeline.release.layout import NOT_FOUND_PAGE
from pipeline.release.preview_server import ASKED_VERSION, IDLE_TIMEOUT, REFUSAL, PreviewRunner
from pipeline.release.ranges import (
    RangeNotSatisfiable,
    byte_ranges,
    multipart_body,
    range_applies,
)
from pipeline.release.swap import live_release

log = logging.getLogger(__name__)
T = TypeVar("T")
HIDDEN = frozenset({HEADERS_FILE, REDIRECTS_FILE, RENAMED_MAP})
TEXT_TYPES = ("application/json", "application/javascript", "text/javascript", "image/svg+xml",
              "application/atom+xml")
mimetypes.add_type("application/atom+xml", ".atom")  # not in every system's table
mimetypes.add_type("text/markdown", ".md")
mimetypes.add_type("text/xml", ".xml")  # the sitemap: the type nginx's mime.types gives it
COMPRESSIBLE = ("text/", *TEXT_TYPES)
# nginx's gzip_min_length in the shipped site: a smaller text goes as it is, with no Vary.
GZIP_MIN_LENGTH = 256


def content_type(path: Path) -> str:
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in TEXT_TYPES:
        return f"{kind}; charset=utf-8"
    return kind


class BadPath(ValueError):
    """A request path no file can have (a NUL byte, a `..` above the root, a `%` that escapes
    nothing)."""


# A `%` not followed by two hex digits: nginx refuses the request (400) before it looks for a file.
BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def normalised_path(raw_path: str) -> str:
    """The path a request names, as nginx reads it before it picks a file or a rule: decoded
    once (`%2F` is a slash), then `.`, `..` and repeated slashes resolved.

    One path, used both to find the file and to pick its header and redirect rules, so that
    `/api/..%2Findex.html` is the page /index.html with the page's headers, not the /api/ ones.
    A trailing slash (or a last `.` or `..`) is kept: it asks for a folder.
    """
    if BAD_ESCAPE.search(raw_path):
        raise BadPath("a % not followed by two hex digits")
    decoded = unquote(raw_path)
    if "\x00" in decoded:
        raise BadPath("a NUL byte in the path")
    parts: list[str] = []
    for part in decoded.split("/"):
        if part == "..":
            if not parts:
                raise BadPath("a path above the root")
            parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    path = "/" + "/".join(parts)
    folder = decoded.endswith("/") or decoded.rsplit("/", 1)[-1] in (".", "..")
    return path + "/" if folder and parts else path


def release_file(folder: Path, path: str) -> Path | None:
    """The file of the release at the normalised URL `path` (a folder's index.html), or None.

    Every spelling of a hidden host file (`/./_headers`, `/x/../_headers`, `/%5Fheaders`,
    `/_headers/`) normalises to one path and resolves to one file, which stays hidden; nothing
    is served through a symlink below the folder (a release holds none), so nothing outside
    it either, as the shipped nginx site's `disable_symlinks` answers.
    """
    relative = path.lstrip("/")
    try:
        literal = folder / relative  # `path` is normalised: no `.` or `..` left to resolve
        candidate = literal.resolve()
        if candidate != literal:  # a symlink on the way
            return None
        if candidate.relative_to(folder).as_posix() in HIDDEN:
            return None
        if candidate.is_dir() and (path.endswith("/") or not relative):
            candidate = candidate / "index.html"
        elif path.endswith("/"):
            return None  # a file is not a folder
        return candidate if candidate.is_file() else None
    except (OSError, RuntimeError):  # a name too long, a symlink loop (RuntimeError before 3.13)
        return None  # no file the host can open: missing, as for nginx


def compressible(kind: str, size: int) -> bool:
    """True when a file of the Content-Type `kind` and `size` bytes is gzipped for a client that
    takes it, as nginx decides: a text, of GZIP_MIN_LENGTH bytes or more (below that, gzip's
    own header and trailer would outweigh what it saves)."""
    return kind.startswith(COMPRESSIBLE) and size >= GZIP_MIN_LENGTH


def accepts_gzip(accept_encoding: str) -> bool:
    """True when an Accept-Encoding value takes gzip (any quality but 0)."""
    for item in accept_encoding.lower().split(","):
        coding, *params = (part.strip() for part in item.split(";"))
        if coding in ("gzip", "x-gzip"):
            quality = next((p.removeprefix("q=") for p in params if p.startswith("q=")), "1")
            try:
                return float(quality) > 0
            except ValueError:
                return False
    return False


# Conditions a request may send once: nginx refuses a request that repeats one (400) before
# it looks for a file, where RFC 9110 §5.3 would join the lines of a list (If-None-Match,
# If-Match). A `Range` sent twice is read by its first line, as nginx reads it.
SINGLE_CONDITIONS = ("If-None-Match", "If-Match", "If-Modified-Since", "If-Unmodified-Since",
                     "If-Range")


def repeated_condition(request: web.Request) -> str | None:
    """The name of the first condition the request sends on more than one line, or None."""
    return next((name for name in SINGLE_CONDITIONS
                 if len(request.headers.getall(name, [])) > 1), None)


def without_content_type(headers: dict[str, str]) -> dict[str, str]:
    """Headers for an answer without a body (204, 304): no representation type."""
    return {name: value for name, value in headers.items() if name.lower() != "content-type"}


def error_answer(status: int, text: str, headers: dict[str, str]) -> web.Response:
    """An answer with the host's own short text: typed as the text it is, whatever type the
    rules give the path (a `405` under /api/ is not JSON), and cached as a live document
    where the rules cache the path at all: a refusal at an immutable file's address is no
    version of it, and a cache that keeps error answers must not serve one for a year."""
    given = without_content_type(headers)
    kept = {name: value for name, value in given.items() if name.lower() != "cache-control"}
    if len(kept) < len(given):
        kept["Cache-Control"] = LIVE_CACHE
    return web.Response(status=status, body=f"{status} {text}\n".encode(), headers={
        **kept, "Content-Type": "text/plain; charset=utf-8"})


def version_refused(version: HttpVersion, headers: dict[str, str]) -> web.Response:
    """The answer to a request line of another HTTP version than 1.x, as nginx gives it: 505
    for a later one (`HTTP/2.0` is no request line of HTTP/2, which begins with its preface),
    400 for `HTTP/0.9`, which names no version; either closes the connection."""
    if version.major > 1:
        answer = error_answer(505, "HTTP version not supported", headers)
    else:
        answer = error_answer(400, f"bad request: HTTP/{version.major}.{version.minor}", headers)
    answer.force_close()
    return answer


class HostFileError(ValueError):
    """A `_headers` or `_redirects` file of the release that cannot be read or understood."""


def host_file(path: Path, parse: Callable[[str], T], default: T) -> T:
    """The rules of the host file `path` (`default` where the release has none), read once at
    start-up: a file the preview cannot read or parse stops it with the file named, before
    any answer goes out with rules the host would read otherwise."""
    if not path.is_file():
        return default
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise HostFileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise HostFileError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    try:
        return parse(text)
    except ValueError as exc:
        raise HostFileError(f"{path}: {exc}") from None


class HostFiles:
    """The release's `_headers` rules and `_redirects`, as the preview answers with them: read
    again once another release went live in the folder (a publish swaps a new folder in while
    the preview runs), as a host reloaded after each publish has them, so a rename published
    meanwhile redirects without a restart. A new release's file that cannot be read or parsed
    is logged, and the last good ones kept; at the start it stops the preview
    (`HostFileError`)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.release = live_release(folder)
        self.rules, self.redirects = self._read()

    def _read(self) -> tuple[Sequence[HeaderRule], list[tuple[str, str, int]]]:
        return (host_file(self.folder / HEADERS_FILE, parse_headers_file,
                          release_header_rules(self.folder)),
                host_file(self.folder / REDIRECTS_FILE, parse_redirects_file,
                          list(REDIRECT_RULES)))

    def refresh(self) -> None:
        """Read the files again if the live release changed since they were read (one
        `stat` a request)."""
        live = live_release(self.folder)
        if live == self.release:
            return
        self.release = live
        try:
            self.rules, self.redirects = self._read()
        except HostFileError as error:
            log.warning("%s; answering with the previous release's host files", error)


def preview_app(folder: Path) -> web.Application:
    folder = folder.resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no published release here (run `apidir run` first)")
    host = HostFiles(folder)
    etags = EtagCache()

    def not_found_document(path: str) -> tuple[str, Path | None]:
        """The normalised path of the document a host answers a missing `path` with, and its
        file (None where the release lacks it): the target of the first 404 rule of
        `_redirects` that matches (a target no path can be is passed over); past the rules,
        the release's own 404 page, which static hosts (and the shipped nginx site) serve for
        any other missing address."""
        for source, target, code in host.redirects:
            if code == 404 and fnmatch.fnmatchcase(path, source):
                try:
                    target = normalised_path(target)
                except BadPath:
                    continue
                return target, release_file(folder, target)
        return "/" + NOT_FOUND_PAGE, release_file(folder, "/" + NOT_FOUND_PAGE)

    def moved_to(path: str) -> str | None:
        """Where a redirect of `_redirects` (a 301 or 308, as a renamed entry's former address
        has) sends a missing `path`, if one matches it exactly."""
        return next((target for source, target, code in host.redirects
                     if code in (301, 308) and source == path), None)

    async def serve_path(request: web.Request) -> web.StreamResponse:
        host.refresh()
        rules = host.rules
        if (version := request.get(ASKED_VERSION)) is not None:
            return version_refused(version, headers_for("/", rules))
        if request.rel_url.raw_path.startswith("*"):  # `OPTIONS *` asks of no file
            return error_answer(404, "not found", headers_for("/", rules))
        # The path of the target, in origin form or absolute form (`http://host/index.html`,
        # which RFC 9112 §3.2.2 says a server MUST accept): rel_url keeps it percent-encoded.
        try:
            path = normalised_path(request.rel_url.raw_path or "/")
        except BadPath as exc:
            log.info("400 for %r: %s", request.raw_path, exc)
            return error_answer(400, f"bad request: {exc}", headers_for("/", rules))
        if (repeated := repeated_condition(request)) is not None:
            return error_answer(400, f"bad request: {repeated} sent twice",
                                headers_for(path, rules))
        if request.method == "OPTIONS":  # a CORS preflight, or a client asking what it may do
            return web.Response(status=204, headers={
                **without_content_type(headers_for(path, rules)), "Allow": ALLOWED_METHODS})
        if request.method not in ("GET", "HEAD"):
            return error_answer(405, "method not allowed",
                                {**headers_for(path, rules), "Allow": ALLOWED_METHODS})
        status, found = 200, release_file(folder, path)
        headers = headers_for(path, rules)
        if found is None and (moved := moved_to(path)) is not None:
            return web.Response(status=301, headers={
                **without_content_type(headers), "Location": moved})
        if found is None:
            # The answer is the 404 document's, with its headers alone, as nginx answers: the
            # rules of a missing immutable path would have the miss cached for a year.
            target, found = not_found_document(path)
            status, headers = 404, headers_for(target, rules)
        try:
            handle = found.open("rb") if found is not None else None
        except PermissionError:  # found but not ours to read: nginx answers 403
            return error_answer(403, "forbidden", headers)
        except OSError:  # gone since it was found: no file to send
            handle = None
        if found is None or handle is None:
            return error_answer(404, "not found", headers)
        headers = {"Content-Type": content_type(found), **headers}
        data = None
        with handle:  # one open file: its version, tag and bytes agree
            stat = os.fstat(handle.fileno())
            compressed = compressible(headers["Content-Type"], stat.st_size)
            if compressed:
                headers["Vary"] = "Accept-Encoding"
                compressed = accepts_gzip(request.headers.get("Accept-Encoding", ""))
            etag = etags.get(stat)
            if etag is None:
                data = handle.read()
                etag = etags.remember(stat, content_etag(data))
            validators = Validators(etag, stat.st_mtime)
            if status != 200:
                # A miss names the 404 document's tag, as nginx does, but no Last-Modified
                # (nginx sends that on a 200, 206 or 304 alone); the conditions asked of the
                # missing file are not this document's to answer.
                headers["ETag"] = validators.headers(compressed)["ETag"]
            elif precondition_failed(request.headers.get("If-Match"),
                                     request.headers.get("If-Unmodified-Since"), validators):
                # the host's text, the same for every client: nothing negotiated
                return error_answer(412, "precondition failed", {
                    name: value for name, value in headers.items() if name != "Vary"})
            else:
                if not_modified(request.headers.get("If-None-Match"),
                                request.headers.get("If-Modified-Since"), validators):
                    # the file's own, strong tag, as nginx names it: its gzip filter, which
                    # weakens the tag of a compressed 200, never looks at a 304
                    return web.Response(status=304, headers=without_content_type(
                        {**headers, **validators.headers()}))
                headers.update(validators.headers(compressed))
            if data is None:
                data = handle.read()
            if status == 200 and not compressed:  # ranges are of the bytes as they are
                return ranged_answer(request, data, validators, headers)
        response = web.Response(body=data, status=status, headers=headers)
        if compressed:
            response.enable_compression(ContentCoding.gzip)
        return response

    @web.middleware
    async def every_target(request: web.Request, handler: Handler) -> web.StreamResponse:
        """The router matches paths only: a target that is none (`OPTIONS *`, `CONNECT
        host:443`, `http://x` with no path) would get aiohttp's bare 404, without the site's
        headers."""
        if request.match_info.http_exception is not None:
            return await serve_path(request)
        return await handler(request)

    def refusal(status: int) -> web.Response:
        """A request aiohttp refused before it reached the app (it could not parse it): the
        host's short text, with the site's headers."""
        return error_answer(status, HTTPStatus(status).phrase.lower(), headers_for("/", host.rules))

    app = web.Application(middlewares=[every_target])
    app[REFUSAL] = refusal
    # Every path, a newline (%0A) in it too: `.` would leave it to aiohttp's bare 404.
    app.router.add_route("*", r"/{tail:[\s\S]*}", serve_path)
    return app


def ranged_answer(request: web.Request, data: bytes, file: Validators,
                  headers: dict[str, str]) -> web.Response:
    """A file sent as it is, as nginx answers its `Range`: the ranges asked (`206`), `416` when
    none can be served, else the whole file, saying that it takes byte ranges."""
    value = request.headers.get("Range")  # the first line, as nginx reads it
    try:
        ranges = (byte_ranges(value, len(data)) if value is not None
                  and range_applies(request.headers.get("If-Range"), file) else None)
    except RangeNotSatisfiable:
        unsatisfied = {name: text for name, text in headers.items()
                       if name not in ("ETag", "Last-Modified")}
        return error_answer(416, "range not satisfiable",
                            {**unsatisfied, "Content-Range": f"bytes */{len(data)}"})
    if ranges is None:
        return web.Response(body=data, headers={**headers, "Accept-Ranges": "bytes"})
    if len(ranges) == 1:
        part = ranges[0]
        return web.Response(status=206, body=data[part.start:part.end], headers={
            **headers, "Content-Range": part.content_range(len(data))})
    kind, body = multipart_body(data, ranges, headers["Content-Type"])
    return web.Response(status=206, body=body, headers={**headers, "Content-Type": kind})


def host_and_port(host: str, port: int) -> str:
    """`host:port` as a URL writes it: an IPv6 address in brackets (`[::1]:8000`), or its
    colons would read as the port's."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def preview_started(folder: Path, host: str, port: int,
                          idle_timeout: float = IDLE_TIMEOUT) -> web.AppRunner:
    """The preview of `folder` listening on `host`:`port` (an OSError, such as a port in use,
    where it cannot), its connections closed once idle for `idle_timeout` seconds; the
    runner's `cleanup()` stops it."""
    runner = PreviewRunner(preview_app(folder), access_log=None, keepalive_timeout=idle_timeout)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner


def serve_release(
    folder: Path, host: str, port: int, ready: Callable[[str], None] | None = None
) -> None:
    """Serve `folder` until interrupted or told to stop (SIGTERM, as a service manager does);
    `ready` is told the address once the port is bound (an OSError, such as a port in use,
    comes before it). SIGTERM is the loop's to handle: raised as an exception by a handler of
    the process, it could land in a callback of the loop, which logs it and serves on."""

    async def serve() -> None:
        stopped = asyncio.Event()
        with suppress(NotImplementedError):  # a loop without signal handlers: the default
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped.set)
        runner = await preview_started(folder, host, port)
        try:
            if ready is not None:
                ready(f"http://{host_and_port(host, port)}/")
            await stopped.wait()
        finally:
            await runner.cleanup()

    asyncio.run(serve())
