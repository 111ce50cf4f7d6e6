"""One entry's day as its trend chart draws it: kept apart from the rollup (which needs the
store and pandas), so the processes that draw the pages load only this."""

from __future__ import annotations

from collections.abc import Iterable
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
