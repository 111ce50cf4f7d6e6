"""One entry's day as its trend chart draws it: kept apart from the rollup (which needs the
store and pandas), so the processes that draw the pages load only this."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date


@dataclass(frozen=True, slots=True)
class DayFigures:
    """One entry's day, as its trend chart draws it."""

    day: date
    probes: int
    responses: int
    p50_ms: float | None
