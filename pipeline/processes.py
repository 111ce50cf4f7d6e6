"""Bulk work on this machine's cores: how many worker processes to take, a fresh pool of them
(started from a warm server where the platform has one), work taken back in the order it was
given, and the cycle collector paused while bulk work builds its objects. On the ground floor,
so every stage that spreads work (reading the entry files, the score stage's spans, the
release's pages and checks) uses the same."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import socket
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

Result = TypeVar("Result")
log = logging.getLogger(__name__)

MOST_WORKERS = 8


def usable_cores() -> int:
    """The cores this process may run on: a container's cpuset or `taskset` leaves fewer than
    the machine has (`os.cpu_count()`)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def worker_count() -> int:
    """The processes a pool takes unless told: one per usable core, up to 8."""
    return min(usable_cores(), MOST_WORKERS)


_SERVER_RUNS: bool | None = None  # whether workers are forked from the server (once known)


def _start_context() -> BaseContext:
    """How workers start: forked from one server process that was itself started fresh (the
    forkserver), where the platform has it and it starts; else spawned. Either way nothing of
    this process's state is inherited, and no process that may run threads (Prefect's, an
    event loop's) is forked. A spawned worker imports what it runs, and this process's main
    module, anew: 0.5 to 2 s of CPU a worker before its first item, on each pool's path."""
    global _SERVER_RUNS
    if _SERVER_RUNS is None:
        _SERVER_RUNS = _server_starts()
    return multiprocessing.get_context("forkserver" if _SERVER_RUNS else "spawn")


def _has_server() -> bool:
    """Whether this platform starts workers from a server (Linux and macOS, not Windows)."""
    return "forkserver" in multiprocessing.get_all_start_methods()


def _server_starts() -> bool:
    """Start the workers' server (in the background: it imports what it preloads on its own);
    False where there is none, or it cannot start: its socket lives in the temporary folder,
    whose path may be too long for one (`TMPDIR`) or not writable."""
    if not _has_server():
        return False
    from multiprocessing import forkserver

    try:
        forkserver.ensure_running()
    except OSError as error:
        log.warning("worker processes are spawned, each importing what it runs: their "
                    "server did not start (%s)", error)
        return False
    return True


def warm_workers(modules: Iterable[str] = ()) -> None:
    """Start the server that workers are forked from, now and in the background, with
    `modules` (those the pools run) and this process's main module imported into it once: a
    pool's workers then start in milliseconds. Call it early, before the work that needs the
    pools; once the server runs it keeps what it imported (without this call, the first pool
    starts it with the main module alone)."""
    if _SERVER_RUNS is not None or not _has_server():
        return
    from multiprocessing import forkserver

    main = getattr(getattr(sys.modules["__main__"], "__spec__", None), "name", None)
    preload = ["__main__", *([main] if main and not main.endswith("__main__") else []), *modules]
    forkserver.set_forkserver_preload(preload)
    _start_context()


def _worker_started(environ: dict[str, str], initializer: Callable[..., None] | None,
                    initargs: tuple[Any, ...]) -> None:
    """A worker's first step: the environment of the process that made its pool (a forked
    worker would have the server's, from when the server started), then `initializer`."""
    if os.environ != environ:
        os.environ.clear()
        os.environ.update(environ)
    if initializer is not None:
        initializer(*initargs)


def worker_pool(workers: int | None = None, initializer: Callable[..., None] | None = None,
                initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """Fresh worker processes (`_start_context`), `worker_count()` of them unless `workers`
    says, each with this process's environment as it is now, then `initializer(*initargs)`."""
    return ProcessPoolExecutor(workers or worker_count(), mp_context=_start_context(),
                               initializer=_worker_started,
                               initargs=(dict(os.environ), initializer, initargs))


def in_own_process(work: Callable[..., Result], *args: Any) -> Result:
    """`work(*args)` in one fresh worker process (`worker_pool`), waited for: work that runs
    beside this process's own on another core without sharing its interpreter lock, and whose
    memory goes back to the system when it ends. An exception it raises is raised here."""
    with worker_pool(1) as pool:
        return pool.submit(work, *args).result()


def in_order(pool: ProcessPoolExecutor | None, work: Callable[..., Result],
             items: Iterable[tuple[Any, ...]], ahead: int) -> Iterator[Result]:
    """`work(*item)` of every item, in order: in `pool`, at most `ahead` items in flight, or
    here one after the other without one."""
    if pool is None:
        for item in items:
            yield work(*item)
        return
    pending: deque[Future[Result]] = deque()
    for item in items:
        pending.append(pool.submit(work, *item))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


@contextmanager
def paused_garbage_collection() -> Iterator[None]:
    """Bulk work that builds millions of small objects holding no cycles (entries, rows,
    models): the cyclic collector would rescan the grown heap over and over (a fifth of a
    100k-entry ingest, 11 of the score stage's 29 s of CPU). Reference counting frees them
    as before. Afterwards what was built goes to the oldest generation at once, left to the
    collector's next full pass rather than walked generation by generation, and the
    collector runs again as it was (a caller that had paused it keeps it paused)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.unfreeze()
        gc.enable()


def process_alive(pid: int) -> bool:
    """Whether a process of this machine runs under `pid` (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_gone(host: str | None, pid: int | None) -> bool:
    """Whether the process `pid` of machine `host` provably runs no more: one of this machine,
    not this process, and not alive. Another machine's cannot be told from here."""
    return (host == socket.gethostname() and pid is not None and pid != os.getpid()
            and not process_alive(pid))


# How long past its time limit a run's record may still say `running` while its process lives:
# the flow is failed at the limit and its hook closes the record then, in seconds. A run
# started longer ago than its limit and this margin ran on a machine that is gone (a container
# replaced, a store restored on another server) or under a process number now another's.
LEFT_BEHIND_MARGIN = timedelta(hours=1)


def left_behind_before(now: datetime, run_timeout: float) -> datetime:
    """The start before which a run still recorded as running is left behind: no run lasts
    past `run_timeout` seconds (APIDIR_RUN_TIMEOUT) and LEFT_BEHIND_MARGIN."""
    return now - timedelta(seconds=run_timeout) - LEFT_BEHIND_MARGIN


def run_left_behind(host: str | None, pid: int | None, started_at: datetime,
                    before: datetime) -> bool:
    """Whether a run recorded as running on `host` under `pid` provably runs no more: its
    process is gone from this machine (`process_gone`), or it started `before` the bound
    of `left_behind_before`, on any machine (another's cannot be asked; here its process
    number may be another process's by now)."""
    return process_gone(host, pid) or started_at < before
