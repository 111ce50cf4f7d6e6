"""aiohttp's server for `apidir serve`, the answers it gives before the preview's code runs
made the preview's.

aiohttp refuses a request it cannot parse (a method token with bad characters, more than
128 header lines, a second Host, a malformed request line) with a bare 400 of its own: no
security header, and a body quoting the request back. Its connection's `handle_error` is the
one hook for those answers, so each connection here is a `PreviewConnection`, made by a
`PreviewServer`, which `PreviewRunner` puts where aiohttp's runner puts its server. aiohttp
also takes an `HTTP/2.0` or `HTTP/0.9` request line for its own version and answers in kind
(`HTTP/2.0 200 OK`): the request is made as HTTP/1.1, the version asked kept under
`ASKED_VERSION` for the app to refuse, as nginx does. A later version its parser does not know
(`HTTP/3.0`, `HTTP/10.0`) it refuses as unparsable: that refusal is the 505 nginx gives, and
every refusal of its own is answered in HTTP/1.1, as nginx answers.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http import HttpVersion, HttpVersion11, RawRequestMessage
from aiohttp.http_exceptions import BadHttpMethod, BadStatusLine
from aiohttp.web_protocol import ERROR, RequestHandler

# The answer the app gives a request refused with `status` before it reached the app.
REFUSAL: web.AppKey[Callable[[int], web.Response]] = web.AppKey("refusal")
# The HTTP version a request line named, where it was another than 1.x.
ASKED_VERSION: web.RequestKey[HttpVersion] = web.RequestKey("asked_version")

# How long a connection may stay idle, and a request's head take to arrive: aiohttp's
# keep-alive timer runs from the connection's start and from each answer until the next head
# is read whole, so one bound stands for nginx's `client_header_timeout` and its
# `keepalive_timeout` (deploy/nginx/apidir.conf), the shorter of the two. aiohttp's own is
# 3,630 s, for which a stalled client holds its connection.
IDLE_TIMEOUT = 60.0

# The version closing the request line aiohttp's parser quotes in its refusal of the line.
QUOTED_VERSION = re.compile(r"HTTP/(\d+)\.\d+['\"]")


def later_version_refused(exc: BaseException | None) -> bool:
    """Whether aiohttp refused a request line for naming an HTTP version after 1.x, which
    its parser takes for no version at all (a 400) where nginx says it speaks none (505)."""
    if not isinstance(exc, BadStatusLine) or isinstance(exc, BadHttpMethod):
        return False
    versions = QUOTED_VERSION.findall(str(exc))
    return bool(versions) and int(versions[-1]) > 1


class PreviewConnection(RequestHandler):
    """One client connection, as aiohttp handles it but for its own refusals, which carry
    the app's answer (its headers and its short text, which quotes nothing) and close."""

    def __init__(self, manager: web.Server, *, refusal: Callable[[int], web.Response],
                 **options: Any) -> None:
        super().__init__(manager, **options)
        self.refusal = refusal

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # aiohttp's own logs the error, and raises where an answer has begun already
        super().handle_error(request, status, exc, message)
        answer = self.refusal(505 if later_version_refused(exc) else status)
        answer.force_close()
        return answer


class PreviewServer(web.Server):
    """aiohttp's low-level server, making `PreviewConnection`s and HTTP/1.1 requests."""

    def __init__(self, made: web.Server, refusal: Callable[[int], web.Response]) -> None:
        super().__init__(made.request_handler, request_factory=self.http_1_request,
                         handler_cancellation=made.handler_cancellation, **made._kwargs)
        self.app_request = made.request_factory
        self.refusal = refusal

    def http_1_request(self, message: RawRequestMessage, *args: Any) -> web.BaseRequest:
        """The app's request for `message`, made as HTTP/1.1 where it named another version
        (which the answer's status line would repeat), that version kept for the app; aiohttp's
        stand-in for a request it refused is made as HTTP/1.1 too, as nginx answers a refusal."""
        if message is ERROR:
            return self.app_request(message._replace(version=HttpVersion11), *args)
        if message.version.major == 1:
            return self.app_request(message, *args)
        request = self.app_request(message._replace(version=HttpVersion11), *args)
        request[ASKED_VERSION] = message.version
        return request

    def __call__(self) -> RequestHandler:
        return PreviewConnection(self, loop=asyncio.get_running_loop(), refusal=self.refusal,
                                 **self._kwargs)


class PreviewRunner(web.AppRunner):
    """aiohttp's runner of an app holding a `REFUSAL`, its server a `PreviewServer`."""

    async def _make_server(self) -> web.Server:
        return PreviewServer(await super()._make_server(), self.app[REFUSAL])
