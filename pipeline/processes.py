"""Bulk work on this machine's cores: how many worker processes to take, a fresh pool of them,
work taken back in the order it was given, and the cycle collector paused while bulk work
builds its objects. On the ground floor, so every stage that spreads work (reading the entry
files, the score stage's spans, the release's pages and checks) uses the same."""

from __future__ import annotations

import gc
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from contextlib import contextmanager
from multiprocessing import get_context
from typing import Any, TypeVar

Result = TypeVar("Result")

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


def worker_pool(workers: int | None = None, initializer: Callable[..., None] | None = None,
                initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """Fresh worker processes (spawned: nothing of this process's state is inherited, and no
    process that may run threads, Prefect's or an event loop's, is forked), `worker_count()`
    of them unless `workers` says."""
    return ProcessPoolExecutor(workers or worker_count(),
                               mp_context=get_context("spawn"), initializer=initializer,
                               initargs=initargs)


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
