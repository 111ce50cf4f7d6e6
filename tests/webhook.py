"""A webhook receiver on loopback: records every JSON body, answers with scripted statuses."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class WebhookReceiver:
    statuses: list[int] = field(default_factory=list)  # answered in turn; then 204
    received: list[dict[str, Any]] = field(default_factory=list)
    content_types: list[str] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    url: str = ""

    async def _receive(self, request: web.Request) -> web.Response:
        self.content_types.append(request.content_type)
        self.received.append(json.loads(await request.read()))
        return web.Response(status=self.statuses.pop(0) if self.statuses else 204)

    async def start(self, statuses: Iterable[int] = ()) -> WebhookReceiver:
        self.statuses = list(statuses)
        app = web.Application()
        app.router.add_post("/hook", self._receive)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/hook"
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def events(self) -> list[str]:
        return [body["event"] for body in self.received]
