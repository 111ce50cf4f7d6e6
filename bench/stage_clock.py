"""Wall and CPU time of the stages of a run, taken in the process that runs them.

The flows call their stages through module attributes (`stages.ingest_entries(...)`), so
replacing an attribute with a timed wrapper measures the real flow without changing what it
does. Process CPU (every thread of the process) is what a stage costs the machine there;
wall minus CPU is time spent waiting: on the network, the disk or another process.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from bench.catalogue import peak_rss_mb, reset_peak_rss


@dataclass
class Timing:
    wall: float = 0.0
    cpu: float = 0.0
    calls: int = 0
    peak_rss_mib: float | None = None  # for a stage with its own high-water mark


@dataclass
class StageClock:
    """Timings by name. A name in `peaks` gets its own high-water mark of the process's
    memory (reset as it starts, so those names must not nest); the process's own peak over
    the whole run is kept in `process_peak_mib`."""

    peaks: frozenset[str] = frozenset()
    timings: dict[str, Timing] = field(default_factory=dict)
    process_peak_mib: float = 0.0

    @contextmanager
    def timing(self, name: str) -> Iterator[None]:
        own_peak = name in self.peaks
        if own_peak:
            self.process_peak_mib = max(self.process_peak_mib, peak_rss_mb())
            reset_peak_rss()
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            timing = self.timings.setdefault(name, Timing())
            timing.wall += time.perf_counter() - wall
            timing.cpu += time.process_time() - cpu
            timing.calls += 1
            if own_peak:
                peak = peak_rss_mb()
                timing.peak_rss_mib = max(timing.peak_rss_mib or 0.0, peak)
                self.process_peak_mib = max(self.process_peak_mib, peak)

    def wrap(self, module: ModuleType, attribute: str, name: str | None = None) -> None:
        """Time every call of `module.attribute` (a function or a coroutine function)."""
        original = getattr(module, attribute)
        label = name or attribute

        if inspect.iscoroutinefunction(original):
            async def timed(*args: Any, **kwargs: Any) -> Any:
                with self.timing(label):
                    return await original(*args, **kwargs)
        else:
            def timed(*args: Any, **kwargs: Any) -> Any:
                with self.timing(label):
                    return original(*args, **kwargs)

        setattr(module, attribute, functools.wraps(original)(timed))

    def peak(self) -> float:
        """The process's peak resident memory over the run so far, in MiB."""
        return max(self.process_peak_mib, peak_rss_mb())
