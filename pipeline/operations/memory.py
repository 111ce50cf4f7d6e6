"""Handing the memory a finished stage freed back to the system.

A stage allocates and frees millions of small blocks (probes, rows, scores). glibc keeps
what Python frees between blocks still in use for the process to reuse, so the flow's one
process would carry the probing's high-water mark into every later stage (some 600 MiB at
100,000 entries). `malloc_trim` returns those free pages; elsewhere (macOS, musl) there is
nothing to call and nothing is done.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim  # the C library the interpreter is linked with
    except (AttributeError, OSError):
        return None


def release_freed_memory() -> bool:
    """Return the free pages of the C allocator's heaps to the system; whether any were."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
