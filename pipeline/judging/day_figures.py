"""One entry's day as its trend chart draws it: kept apart from the rollup (which needs the
store and pandas), so the processes that draw the pages load only this."""

from __future__ import annotations

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
