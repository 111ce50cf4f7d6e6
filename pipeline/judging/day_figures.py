"""One entry's day as its trend chart draws it: kept apart from the rollup (which needs the
store and pandas), so the processes that draw the pages load only this."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import date
from typing import Any


@dataclass(frozen=True, slots=True)
class DayFigures:
    """One entry's day, as its trend chart draws it."""

    day: date
    probes: int
    successes: int  # probes that succeeded: the day's uptime
    p50_ms: float | None  # of the successful probes' times

    def __reduce__(self) -> tuple[Any, tuple[int, int, int, float | None]]:
        """Pickled as the day's ordinal and three numbers: the pages' workers are sent 30 days
        of every entry, and a dataclass's own pickling (its state by field names, the date as
        an object) cost three times the CPU on both sides."""
        return _day_figures, (self.day.toordinal(), self.probes, self.successes, self.p50_ms)


def _day_figures(ordinal: int, probes: int, successes: int, p50_ms: float | None) -> DayFigures:
    return DayFigures(date.fromordinal(ordinal), probes, successes, p50_ms)


# A day as the pages' workers are sent it and the trend chart draws it: its ordinal and three
# numbers. A plain tuple pickles and unpickles without a call of Python code; a DayFigures
# costs one on each side (and its frozen fields four more on the workers' side), some 0.1 ms
# an entry of 30 days in all.
SentDay = tuple[int, int, int, float | None]


def sent_days(days: Iterable[DayFigures]) -> tuple[SentDay, ...]:
    """An entry's days as the pages' workers are sent them."""
    return tuple((d.day.toordinal(), d.probes, d.successes, d.p50_ms) for d in days)


FIGURES = 4  # the numbers of a SentDay


class Trends(Mapping[str, list[SentDay]]):
    """Each entry's days, oldest first, as the pages' workers are sent them, kept flat: an
    entry's days as one tuple of their numbers, made into SentDays when the entry is asked for
    (a chunk of entries at a time). A SentDay held for each of the 3,000,000 days of 100,000
    entries with 30 days (its tuple, its ordinal and its median: some 150 bytes) would be some
    450 MB of the publishing process, through its pages; flat, with one object for each
    distinct ordinal and median, some 32 bytes a day."""

    def __init__(self, rows: Iterable[tuple[str, date, int, int, float | None]] = (),
                 leaving_out: Iterable[str] = ()) -> None:
        """From (entry id, day, probes, successes, median) rows, each entry's oldest first;
        the entries in `leaving_out` without a day, as if none of theirs were read."""
        self._days: dict[str, Any] = {}
        ordinals: dict[date, int] = {}
        medians: dict[float, float] = {}  # floats only: an int is never taken for one
        for entry_id, day, probes, successes, p50_ms in rows:
            ordinal = ordinals.get(day)
            if ordinal is None:
                ordinal = ordinals[day] = day.toordinal()
            if p50_ms.__class__ is float:
                p50_ms = medians.setdefault(p50_ms, p50_ms)
            days = self._days.get(entry_id)
            if days is None:
                days = self._days[entry_id] = []
            days += (ordinal, probes, successes, p50_ms)
        for entry_id in leaving_out:  # a few: dropped once read rather than asked of each day
            self._days.pop(entry_id, None)
        for entry_id, days in self._days.items():  # without a list's spare room
            self._days[entry_id] = tuple(days)

    def __getitem__(self, entry_id: str) -> list[SentDay]:
        figures = iter(self._days[entry_id])
        return list(zip(*[figures] * FIGURES, strict=True))

    def __iter__(self) -> Iterator[str]:
        return iter(self._days)

    def __len__(self) -> int:
        return len(self._days)
