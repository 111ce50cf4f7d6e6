"""`apidir serve`: preview a published release locally, as its static host would serve it.

The headers and the JSON 404 come from the release's own `_headers` and `_redirects`
files (Netlify semantics: a redirect applies only where no file matches), so the preview
shows what those files say; without them, the rules of `pipeline.release.hosting` apply.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import mimetypes
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

from aiohttp import web

from pipeline.release.hosting import (
    HEADER_RULES,
    HEADERS_FILE,
    REDIRECT_RULES,
    REDIRECTS_FILE,
    HeaderRule,
    headers_for,
    parse_headers_file,
    parse_redirects_file,
)

log = logging.getLogger(__name__)
HIDDEN = frozenset({HEADERS_FILE, REDIRECTS_FILE})
TEXT_TYPES = ("application/json", "application/javascript", "text/javascript", "image/svg+xml")
COMPRESSIBLE = ("text/", *TEXT_TYPES)


def content_type(path: Path) -> str:
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in TEXT_TYPES:
        return f"{kind}; charset=utf-8"
    return kind


class BadPath(ValueError):
    """A request path no file can have (a NUL byte)."""


def release_file(folder: Path, url_path: str) -> Path | None:
    """The file of the release at `url_path` (a folder's index.html), or None.

    The path is decoded and resolved once, then decided on: every spelling of a hidden host
    file (`/./_headers`, `/x/../_headers`, `/%5Fheaders`, `/_headers/`) is the same file, and
    hidden; nothing outside the folder is served.
    """
    decoded = unquote(url_path)
    if "\x00" in decoded:
        raise BadPath("a NUL byte in the path")
    relative = decoded.lstrip("/")
    candidate = (folder / relative).resolve()
    if not candidate.is_relative_to(folder):
        return None
    if candidate.relative_to(folder).as_posix() in HIDDEN:
        return None
    if candidate.is_dir() and (decoded.endswith("/") or not relative):
        candidate = candidate / "index.html"
    elif decoded.endswith("/"):
        return None  # a file is not a folder
    return candidate if candidate.is_file() else None


def preview_app(folder: Path) -> web.Application:
    folder = folder.resolve()
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder}: no published release here (run `apidir run` first)")
    headers_file, redirects_file = folder / HEADERS_FILE, folder / REDIRECTS_FILE
    rules: list[HeaderRule] | tuple[HeaderRule, ...] = (
        parse_headers_file(headers_file.read_text()) if headers_file.is_file() else HEADER_RULES
    )
    redirects = (
        parse_redirects_file(redirects_file.read_text())
        if redirects_file.is_file()
        else list(REDIRECT_RULES)
    )

    async def serve_path(request: web.Request) -> web.StreamResponse:
        path = request.path
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="405 method not allowed\n",
                                headers={**headers_for(path, rules), "Allow": "GET, HEAD"})
        try:
            status, found = 200, release_file(folder, request.raw_path.split("?", 1)[0])
        except BadPath as exc:
            log.info("400 for %r: %s", request.raw_path, exc)
            return web.Response(status=400, text=f"400 bad request: {exc}\n",
                                headers=headers_for("/", rules))
        if found is None:
            status = 404
            target = next((t for s, t, code in redirects
                           if code == 404 and fnmatch.fnmatchcase(path, s)), None)
            found = release_file(folder, target) if target else None
        if found is None:
            headers = headers_for(path, rules)
            return web.Response(status=404, text="404 not found\n", headers=headers)
        headers = {"Content-Type": content_type(found), **headers_for(path, rules)}
        response = web.Response(body=found.read_bytes(), status=status, headers=headers)
        if headers["Content-Type"].startswith(COMPRESSIBLE):
            response.headers["Vary"] = "Accept-Encoding"
            response.enable_compression()
        return response

    app = web.Application()
    # Every path, a newline (%0A) in it too: `.` would leave it to aiohttp's bare 404.
    app.router.add_route("*", r"/{tail:[\s\S]*}", serve_path)
    return app


def serve_release(
    folder: Path, host: str, port: int, ready: Callable[[str], None] | None = None
) -> None:
    """Serve `folder` until interrupted; `ready` is told the address once the port is bound
    (an OSError, such as a port in use, comes before it)."""

    async def serve() -> None:
        runner = web.AppRunner(preview_app(folder), access_log=None)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            if ready is not None:
                ready(f"http://{host}:{port}/")
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    asyncio.run(serve())
