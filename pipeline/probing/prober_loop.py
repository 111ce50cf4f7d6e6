"""The prober's own event loop: uvloop where it is installed, in a worker thread.

The prober is CPU-bound in its event loop (TLS set-up, asyncio's SSL protocol, aiohttp's
request path); on uvloop the same probes take about a tenth less CPU per URL
(docs/performance.md). A loop of its own leaves the caller's loop (Prefect's, in the probe
stage) as it is, and free while the probes run.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def new_prober_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop, or asyncio's default one where uvloop is missing (Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()

    class ProberLoop(uvloop.Loop):
        """uvloop, answering an IP address's own lookup at once.

        uvloop's `sock_connect` (which aiohttp connects through) looks up the address it is
        given, already an IP address, without a socket type, which misses uvloop's shortcut
        for addresses: every connection made a round trip through libuv's thread pool (a
        tenth of the prober's CPU). That one kind of call is answered here as the thread
        pool would have answered it first: the stream socket's address.
        """

        async def getaddrinfo(  # type: ignore[override]
            self,
            host: Any,
            port: Any,
            *,
            family: int = 0,
            type: int = 0,
            proto: int = 0,
            flags: int = 0,
        ) -> list[tuple[Any, ...]]:
            if type == 0 and proto == 0 and flags == 0 and _is_address(host, family):
                type = socket.SOCK_STREAM  # the shortcut's answer: this one entry
            return await super().getaddrinfo(
                host, port, family=family, type=type, proto=proto, flags=flags
            )

    return ProberLoop()


def _is_address(host: Any, family: int) -> bool:
    """`host` is an IP address written in `family` (IPv4 or IPv6)."""
    if family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(host, str):
        return False
    try:
        socket.inet_pton(family, host)
    except OSError:
        return False
    return True


async def run_on_prober_loop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Await `make()` run on a prober loop in a thread of its own; cancelling the caller
    cancels it there, and returns once it has cleaned up (sessions closed)."""
    loop = new_prober_loop()
    thread = threading.Thread(target=loop.run_forever, name="prober", daemon=True)
    thread.start()
    try:
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(make(), loop))
    finally:  # after a cancellation too: its task is cancelled there first (FIFO callbacks)
        await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_finish_tasks(), loop))
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
        loop.close()


async def _finish_tasks() -> None:
    """Let every other task of this loop end (a cancelled probe run closes its session)."""
    others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    await asyncio.gather(*others, return_exceptions=True)
    await asyncio.get_running_loop().shutdown_asyncgens()
