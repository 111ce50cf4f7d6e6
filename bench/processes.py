"""Peak memory and CPU of every process of a run, read from /proc while it runs (Linux).

A run spreads over processes the benchmark did not start itself (Prefect's temporary server,
PostgreSQL's backends), so a thread samples /proc: every process descended from the given
roots, its resident-set high-water mark (VmHWM) and its CPU time. A process that ends between
two samples keeps the figures of its last sample; the sampling interval bounds what is missed.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Watched:
    """What was seen of one process."""

    pid: int
    command: str
    ancestors: tuple[int, ...]  # parent first
    peak_rss_mib: float = 0.0
    cpu_start: float = 0.0  # CPU seconds already spent when first seen (0 if born meanwhile)
    cpu_seconds: float = 0.0  # CPU seconds at the last sample

    @property
    def cpu_used(self) -> float:
        return self.cpu_seconds - self.cpu_start


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a process; None if it is gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / TICKS


def _peak_rss_mib(pid: int) -> float:
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return 0.0
    kib = next((line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")), 0)
    return int(kib) / 1024


def _command(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()[:200]


def reset_peak_rss(pid: int) -> None:
    """Start a new high-water mark for `pid` (writing 5 to clear_refs); needs the right to."""
    with suppress(OSError):
        (PROC / str(pid) / "clear_refs").write_text("5")


@dataclass
class ProcessWatch:
    """Samples the descendants of `roots` (and the roots) every `interval` seconds in a
    thread, from `start()` to `stop()`. Processes alive at the start get a fresh high-water
    mark and count only the CPU they spend from then on."""

    roots: Iterable[int]
    interval: float = 0.5
    seen: dict[int, Watched] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> ProcessWatch:
        self.sample(first=True)
        self._thread = threading.Thread(target=self._run, name="process-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[Watched]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.sample()
        return sorted(self.seen.values(), key=lambda watched: watched.pid)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self, first: bool = False) -> None:
        stats = {}
        for entry in PROC.iterdir():
            if entry.name.isdigit() and (stat := _stat(int(entry.name))) is not None:
                stats[int(entry.name)] = stat
        roots = set(self.roots)
        for pid, (_parent, cpu) in stats.items():
            chain = self._ancestors(pid, stats)
            if pid not in roots and not roots.intersection(chain):
                continue
            watched = self.seen.get(pid)
            if watched is None:
                if first:
                    reset_peak_rss(pid)
                watched = self.seen[pid] = Watched(pid, _command(pid), chain,
                                                   cpu_start=cpu if first else 0.0)
            watched.cpu_seconds = cpu
            watched.peak_rss_mib = max(watched.peak_rss_mib, _peak_rss_mib(pid))

    @staticmethod
    def _ancestors(pid: int, stats: dict[int, tuple[int, float]]) -> tuple[int, ...]:
        chain = []
        parent = stats[pid][0]
        while parent in stats and parent not in chain:
            chain.append(parent)
            parent = stats[parent][0]
        return tuple(chain)
