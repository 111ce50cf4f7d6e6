"""The prober's own event loop: uvloop where it is installed, in a worker thread.

The prober is CPU-bound in its event loop (TLS set-up, asyncio's SSL protocol, aiohttp's
request path); on uvloop the same probes take about a tenth less CPU per URL
(docs/performance.md). A loop of its own leaves the caller's loop (Prefect's, in the probe
stage) as it is, and free while the probes run. While probes run, the cyclic collector's
young generation is collected less often (`young_collections_spaced`).
"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")

# Tracked objects allocated (net) between young collections while probes run; CPython's
# default is 700. A 40,000-URL run then makes 3 young collections instead of 2,835: the
# probes in flight rarely hold this many at once, so their objects are freed uncollected.
PROBING_YOUNG_THRESHOLD = 100_000

_spacing_lock = threading.Lock()
_spacing_users = 0
_default_threshold: tuple[int, ...] = ()


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


@contextmanager
def young_collections_spaced() -> Iterator[None]:
    """The cyclic collector's young generation collected every `PROBING_YOUNG_THRESHOLD`
    allocations instead of every 700, in this process, until the last user leaves.

    A probe's objects (task, coroutines, request, response, timers) live about a second, its
    host's interval and latency: at 700 they outlived two young collections and went to the
    oldest generation, whose full collections (every tenth middle one) then walked the whole
    heap, every result and host of the run so far among it. That made a probe's CPU grow
    with the run's size (at 20,000 hosts, 15 % of the prober's CPU was the collector). Spaced
    out, they die young, reference cycles are still collected, and memory stays as it was.
    """
    global _spacing_users, _default_threshold
    with _spacing_lock:
        if _spacing_users == 0:
            _default_threshold = gc.get_threshold()
            gc.set_threshold(PROBING_YOUNG_THRESHOLD, *_default_threshold[1:])
        _spacing_users += 1
    try:
        yield
    finally:
        with _spacing_lock:
            _spacing_users -= 1
            if _spacing_users == 0:
                gc.set_threshold(*_default_threshold)


async def run_on_prober_loop(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Await `make()` run on a prober loop in a thread of its own; cancelling the caller
    cancels it there, and returns once it has cleaned up (sessions closed)."""
    loop = new_prober_loop()
    thread = threading.Thread(target=loop.run_forever, name="prober", daemon=True)
    with young_collections_spaced():
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
