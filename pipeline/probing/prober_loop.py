"""The prober's own event loop: uvloop where it is installed, in a worker thread.

The prober is CPU-bound in its event loop (TLS set-up, asyncio's SSL protocol, aiohttp's
request path); on uvloop the same probes take about a tenth less CPU per URL
(docs/performance.md). A loop of its own leaves the caller's loop (Prefect's, in the probe
stage) as it is, and free while the probes run.
"""

from __future__ import annotations

import asyncio
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
    return uvloop.new_event_loop()


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
