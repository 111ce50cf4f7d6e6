"""Work spread over worker processes, one per core, its results taken back in the order it
was given: the pages of a large release's entries (`site`) and the checks of its entry lines
(`validate`)."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any, TypeVar

Result = TypeVar("Result")


def worker_count() -> int:
    """The processes a pool takes unless told: one per core, up to 8."""
    return min(os.cpu_count() or 1, 8)


def worker_pool(workers: int | None = None, initializer: Callable[..., None] | None = None,
                initargs: tuple[Any, ...] = ()) -> ProcessPoolExecutor:
    """Fresh worker processes (spawned: nothing of this process's state is inherited), one per
    core up to 8 unless `workers` says."""
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
