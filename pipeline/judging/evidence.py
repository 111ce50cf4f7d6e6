"""The score stage's evidence, read in bounded memory: complete past days from the daily
rollups, and raw probes only for the days the windows cut through.

The windows end at `as_of` (T, on day D): 1 day, 7 days and 30 days back, each holding the
probes after its start. A past day wholly inside or wholly outside each window is given
exactly by its rollups (counts and every timed successful probe of the day); the raw history is
read for D and for each day a window starts inside (`evidence_days`). At a time of day, those are
D-1, D-7 and D-30: each is read from the first window start inside it on, its probes counted
for the windows starting inside it, while the windows that hold it whole count it from its
rollups. The nightly runs after the day's probes, near the same time each night, so those
three parts hold next to no probes. At a day's last instant, as the rollups score a day, the
windows begin at days' ends, so only D is read raw and D-30 not at all. Scores and uptimes
come out equal to those computed from the whole raw window (tests compare them), while the
stage reads about one day of probes, however many nights the store holds.

A complete past day's rollup evidence (each probed entry's counts of probes and successful
probes, and the times of the successful ones) is
kept beside its rows, in columns of its `RolledDay` written with them (`day_evidence`): the
stage reads such a day as one row, not as the rows of each of its entries; a day rolled up
before that is read from its rows.

A past day whose rollups are missing or were computed before it ended (a night that did not
run) is read whole from its raw probes instead: the stage only reads, so scoring in several
processes at once (publishers waiting for each other) never races to write rollups.
"""

from __future__ import annotations

import heapq
from collections.abc import Collection, Iterator, Mapping
from datetime import date, datetime, timedelta
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np
import orjson
import pandas as pd
from pandas.api.types import union_categoricals
from sqlalchemy import Text, cast, func, or_
from sqlmodel import Session, col, select

from pipeline.judging.score import (
    COUNT_COLUMNS,
    FAILED_PROBE_MS,
    SAMPLE_COLUMNS,
    WINDOWS,
    ContentScores,
    EntryScores,
    prepare_history,
    scores_from_samples,
    timed_samples,
    uptimes_from_counts,
    window_counts,
)
from pipeline.store.history import Unlisted, entries_history, history_frame, unlisted_probes
from pipeline.store.tables import (
    EVERY_ENTRY,
    DailyEntryRollup,
    EntryRow,
    EntrySpan,
    PipelineRun,
    RolledDay,
    as_utc,
    day_bounds,
)

WINDOW_DAYS = max(WINDOWS.values())  # the longest window
EPOCH_DAY = date(1970, 1, 1)  # a sample's `day` counts the days since
SAMPLE_KINDS = {"total_ms": float, "failed": bool, "day": np.int32, "in_7d": bool,
                "in_30d": bool}  # every sample column but the entry's


def days_between(start: date, end: date) -> list[date]:
    """Every date from `start` to `end`, both included."""
    if end < start:
        raise ValueError(f"the range ends ({end}) before it starts ({start})")
    return [start + timedelta(days=n) for n in range((end - start).days + 1)]


def complete_days(session: Session, days: Collection[date]) -> set[date]:
    """Those of `days` whose rollups were computed for every entry after the day ended and read
    every trusted run with probes that day: each such run is among those its `RolledDay` names
    (`runs_read`), so a run judged after the rollup read the day makes it incomplete whatever
    the clocks of the machines that judged and rolled up said (a clock stepped back, or
    another machine's, dates probes in a day already rolled up). A day with probes of a run
    still open is not complete yet: that run may still be judged."""
    statement = select(RolledDay.day, RolledDay.rolled_at, RolledDay.runs_read).where(
        col(RolledDay.day).in_(days))
    rolled = {day: read_run_ids(runs_read) for day, rolled_at, runs_read in session.exec(statement)
              if as_utc(rolled_at) > day_bounds(day)[1]}
    if not rolled:
        return set()
    late = select(PipelineRun.id, PipelineRun.first_checked_at, PipelineRun.last_checked_at,
                  PipelineRun.judged_at).where(
        col(PipelineRun.first_checked_at) <= day_bounds(max(rolled))[1],
        col(PipelineRun.last_checked_at) >= day_bounds(min(rolled))[0],
        or_(col(PipelineRun.judged_at).is_(None) & (col(PipelineRun.state) == "running"),
            col(PipelineRun.judged_at).is_not(None)
            & col(PipelineRun.network_suspect).is_(False)))
    for run_id, first, last, judged_at in session.exec(late):
        for day in days_between(max(as_utc(first).date(), min(rolled)),
                                min(as_utc(last).date(), max(rolled))):
            if day in rolled and (judged_at is None or run_id not in rolled[day]):
                del rolled[day]
    return set(rolled)


def day_runs(session: Session, day: date) -> str:
    """The trusted runs with probes in `day` (by their first and last check times), as
    `RolledDay.runs_read` keeps them: their ids joined by commas, ascending. Asked before the
    day's probes are read: a run judged in between is read too, and only rolls the day up
    once more."""
    start, end = day_bounds(day)
    statement = select(PipelineRun.id).where(
        col(PipelineRun.judged_at).is_not(None), col(PipelineRun.network_suspect).is_(False),
        col(PipelineRun.first_checked_at) <= end, col(PipelineRun.last_checked_at) >= start)
    return ",".join(str(run_id) for run_id in sorted(session.exec(statement)))


def read_run_ids(runs_read: str | None) -> set[int]:
    """The run ids `RolledDay.runs_read` names (none where it names none)."""
    return {int(run_id) for run_id in runs_read.split(",")} if runs_read else set()


def _window_starts(as_of: datetime) -> dict[str, datetime]:
    """Where each window ending at `as_of` starts (a window holds the probes after it)."""
    return {name: as_of - timedelta(days=days) for name, days in WINDOWS.items()}


def evidence_days(as_of: datetime) -> tuple[list[date], list[date]]:
    """The days whose probes count in a window ending at `as_of`, as (raw, rolled): `as_of`'s
    own day and each past day a window starts inside are read raw; the rollups of the past
    days wholly inside or outside each window stand in for their probes (days before every
    window are in neither)."""
    day = as_of.date()
    starts = _window_starts(as_of).values()
    raw, rolled = [day], []
    for back in range(1, WINDOW_DAYS + 1):
        past = day - timedelta(days=back)
        first, last = day_bounds(past)
        if all(last <= start for start in starts):
            continue
        (raw if any(first <= start < last for start in starts) else rolled).append(past)
    return raw, rolled


def day_history(session: Session, day: date, until: datetime | None = None,
                span: EntrySpan = EVERY_ENTRY) -> pd.DataFrame:
    """The trusted raw probes of `day` (up to `until`; of the entries in `span`), read for that
    day alone."""
    start, end = day_bounds(day)
    return history_frame(session, since=start, until=end if until is None else min(end, until),
                         span=span)


def _raw_history(session: Session, as_of: datetime, days: list[date],
                 read: Mapping[date, pd.DataFrame], span: EntrySpan) -> pd.DataFrame:
    """The raw probes of `days`, up to `as_of`; those of a day in `read` are taken as read."""
    frames = [read[day] if day in read else day_history(session, day, as_of, span)
              for day in days]
    return pd.concat([f for f in frames if not f.empty] or frames[:1], ignore_index=True)


def _cut_day(session: Session, day: date, as_of: datetime,
             span: EntrySpan) -> pd.DataFrame | None:
    """The prepared probes of `day` (a past day a window starts inside, whose rollups are
    complete), read from the first window start inside it on, and counted only for the
    windows that start inside it: the windows that hold the whole day count it from its
    rollups. None where it holds no probe: the nightly runs near the same time each night, so
    the windows mostly start after its probes, and an empty frame prepared cost some 10-20 ms
    of pandas' steps a day, adding nothing."""
    first, last = day_bounds(day)
    starts = _window_starts(as_of)
    since = min(start for start in starts.values() if first <= start < last)
    history = history_frame(session, since=since, until=min(last, as_of), span=span)
    if history.empty:
        return None
    frame = prepare_history(history, as_of)
    whole = [f"in_{name}" for name, start in starts.items() if start < first]
    if whole:
        frame[whole] = False
    return frame


def _day_timed(text: str) -> tuple[np.ndarray, np.ndarray]:
    """The timed responses of a day's rollup rows, from their JSON lists written one after the
    other (`[1.5,2][][30]`; PostgreSQL with a space after each comma; `null` holds none), as
    one array of them all and how many each row holds. The rows are told apart by their
    brackets, a byte array at a time, and the numbers parsed as one JSON list: a day of
    50,000 entries is one parse, not 50,000."""
    text = text.replace("null", "[]")
    marks = np.frombuffer(text.encode(), dtype=np.uint8)
    opens, closes = (np.flatnonzero(marks == ord(b)) for b in "[]")
    commas = np.flatnonzero(marks == ord(","))
    if len(opens) != len(closes):
        raise ValueError("a rollup row's timed responses are not a JSON list")
    inner = np.searchsorted(commas, closes) - np.searchsorted(commas, opens)
    sizes = np.where(closes - opens > 1, inner + 1, 0)
    joined = text.replace("[]", "").replace("][", ",")
    values = np.array(orjson.loads(joined) if joined else [], dtype=float)
    if len(values) != sizes.sum():
        raise ValueError("a rollup row's timed responses are not a JSON list of numbers")
    return values, sizes


class DayEvidence(NamedTuple):
    """A complete day's rollup evidence of its probed entries, row by row: their ids (joined
    by commas), probe and success counts, their timed successful probes one row's after the
    other, and how many each row holds."""

    entries: str
    probes: np.ndarray
    successes: np.ndarray
    timed: np.ndarray
    sizes: np.ndarray

    def packed(self) -> dict[str, Any]:
        """As `RolledDay` keeps it: the ids, and the numbers as one byte string (how many rows
        and timed responses, then the counts, the sizes and the timed responses)."""
        arrays = [np.array([len(self.sizes), len(self.timed)], dtype="<i8"),
                  *(values.astype("<i8") for values in (self.probes, self.successes,
                                                         self.sizes)),
                  self.timed.astype("<f8")]
        return {"evidence_entries": self.entries,
                "evidence": b"".join(values.tobytes() for values in arrays)}

    @classmethod
    def unpacked(cls, entries: str, packed: bytes) -> DayEvidence:
        """What `packed` gave, its arrays read in place; a byte string of another length, or
        whose rows do not hold its timed responses, is refused (`_day_timed` refuses the same
        of a day read from its rows)."""
        rows, samples = (int(n) for n in np.frombuffer(packed, dtype="<i8", count=2))
        if len(packed) != 8 * (2 + 3 * rows + samples):
            raise ValueError("a day's kept rollup evidence is cut short or too long")
        counts = np.frombuffer(packed, dtype="<i8", count=3 * rows, offset=16).reshape(3, rows)
        if counts[2].sum() != samples:
            raise ValueError("a day's kept rollup evidence holds other timed responses than its "
                             "rows")
        timed = np.frombuffer(packed, dtype="<f8", offset=16 + 24 * rows)
        return cls(entries, counts[0], counts[1], timed, counts[2])

    def row_count(self) -> int:
        """How many rows (probed entries) the day holds, by its ids."""
        return self.entries.count(",") + 1 if self.entries else 0


def day_evidence(session: Session, day: date) -> dict[str, Any]:
    """`day`'s rollup evidence, every probed entry's, from its stored rows, packed for
    `RolledDay` (written with the rows: the score stage then reads the day as one row)."""
    found = next(_aggregated_days(session, [day], EVERY_ENTRY), None)
    empty = np.empty(0, dtype=np.int64)
    return (DayEvidence("", empty, empty, np.empty(0), empty) if found is None
            else found[1]).packed()


def _aggregated_days(session: Session, days: list[date],
                     span: EntrySpan) -> Iterator[tuple[date, DayEvidence]]:
    """Each of `days`' rollup evidence (of the entries in `span`), read from its rows, a day
    at a time, in day order.

    One row per day: each column of the day's rows joined into one text in the database, in
    one pass of the rows in their key's order (day, entry), so the some 1.45 million rows of
    a span of 100,000 entries with 30 nights never reach Python one by one, and nothing is
    sorted (grouped by entry, SQLite sorted them all: some 2.3 s a span). The aggregates of
    one group see its rows in the same order, so the texts line up row by row (checked by
    the caller: each day's texts hold as many entries, counts and lists of timed responses).
    """
    if not days:
        return
    rollup = DailyEntryRollup.__table__.c

    def joined(column: Any, separator: str = ",") -> Any:
        return func.aggregate_strings(cast(column, Text), separator)

    timed = func.coalesce(cast(rollup.timed_ms, Text), "[]")  # a row of no list holds none
    statement = (
        select(rollup.day, joined(rollup.entry_id), joined(rollup.probes),
               joined(rollup.successes), joined(timed, ""))
        .where(rollup.day.in_(days), rollup.probes > 0, span.holds(rollup.entry_id))
        .group_by(rollup.day).order_by(rollup.day))
    for day, ids, probes, successes, timed_text in session.connection().execute(statement):
        probed, succeeded = (np.array(orjson.loads(f"[{text}]"), dtype=np.int64)
                             for text in (probes, successes))
        yield day, DayEvidence(ids, probed, succeeded, *_day_timed(timed_text))


def _kept_days(session: Session, days: list[date]) -> Iterator[tuple[date, DayEvidence]]:
    """The rollup evidence `RolledDay` keeps of those of `days` that have it, in day order, a
    day at a time (some 6 MB a day of 100,000 entries): fetched a row at a time, so PostgreSQL's
    client holds one day, not the span's 30 (some 170 MB)."""
    statement = (select(RolledDay.day, RolledDay.evidence_entries, RolledDay.evidence)
                 .where(col(RolledDay.day).in_(days), col(RolledDay.evidence).is_not(None))
                 .order_by(RolledDay.day).execution_options(yield_per=1))
    for day, entries, packed in session.connection().execute(statement):
        yield day, DayEvidence.unpacked(entries or "", packed)


def _rollup_evidence(session: Session, days: list[date], week_starts: date,
                     span: EntrySpan, wanted: Collection[str] | None = None,
                     ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Timed samples and window counts of `days` (complete past days), from their rollups, of
    the entries in `span`: those of `wanted` where it is given (the span's, as read).

    A day is read from the evidence its `RolledDay` keeps (one row of the day's every entry,
    those of `wanted` taken), else from its rows (`_aggregated_days`), a day at a time: each
    day's evidence goes as the next day's comes. Without `wanted`, a span's entries are those
    the store holds in it, compared in the store's own order as the rows are: a PostgreSQL
    collation may sort ids otherwise than their code points.
    """
    if wanted is None and span != EVERY_ENTRY:
        wanted = set(session.exec(select(EntryRow.id).where(span.holds(EntryRow.id))))
    kept_days = set(session.exec(select(RolledDay.day).where(
        col(RolledDay.day).in_(days), col(RolledDay.evidence).is_not(None))))
    read = heapq.merge(_kept_days(session, sorted(kept_days)),
                       _aggregated_days(session, sorted(set(days) - kept_days), span),
                       key=itemgetter(0))
    codes: dict[str, int] = {}  # each entry's code, as first met
    # the rows taken of a day's entries and their codes, by their text: days alike
    taken_of: dict[str, tuple[np.ndarray | None, np.ndarray]] = {}
    at_days, probed, succeeded, timed_ms, timed_at, failed_at, weeks, ordinals = (
        [], [], [], [], [], [], [], [])
    for day, evidence in read:
        if not (evidence.row_count() == len(evidence.sizes) == len(evidence.probes)
                == len(evidence.successes)):
            raise ValueError(f"the rollups of {day} do not line up row by row")
        taken, at = taken_of.get(evidence.entries) or taken_of.setdefault(
            evidence.entries, _coded(evidence.entries, wanted, codes))
        ms, sizes = evidence.timed, evidence.sizes
        if taken is None:
            probed.append(evidence.probes)
            succeeded.append(evidence.successes)
        else:
            probed.append(evidence.probes[taken])
            succeeded.append(evidence.successes[taken])
            ms, sizes = ms[np.repeat(taken, sizes)], sizes[taken]
        at_days.append(at)
        timed_ms.append(ms)
        timed_at.append(np.repeat(at, sizes))
        failed_at.append(np.repeat(at, probed[-1] - succeeded[-1]))  # Latency counts failures
        weeks.append(day >= week_starts)
        ordinals.append((day - EPOCH_DAY).days)
    entries = pd.Index(list(codes), dtype=object)

    none = np.zeros(len(entries), dtype=np.int64)  # a rolled day is never the day before

    def summed(week_only: bool) -> dict[str, np.ndarray]:
        """Each entry's probes and successful probes summed over the days (of the week alone, or
        all): the days' entries joined once for both."""
        kept = [n for n, in_7d in enumerate(weeks) if in_7d or not week_only]
        if not kept:
            return {"probes": none, "succeeded": none, "days": none}
        at = np.concatenate([at_days[n] for n in kept])
        probed_days = [(probes > 0).astype(np.int64) for probes in probed]  # a row a day
        return {kind: np.bincount(at, np.concatenate([values[n] for n in kept]),
                                  minlength=len(entries)).astype(np.int64)  # exact below 2**53
                for kind, values in (("probes", probed), ("succeeded", succeeded),
                                     ("days", probed_days))}

    week, month = summed(week_only=True), summed(week_only=False)
    counted = pd.DataFrame({
        "entry_id": entries.to_numpy(), "probes_1d": none, "succeeded_1d": none, "days_1d": none,
        **{f"{kind}_{name}": figures[kind] for name, figures in (("7d", week), ("30d", month))
           for kind in ("probes", "succeeded", "days")}},
        columns=COUNT_COLUMNS)
    # built at once, in the samples' column order: some 3.6 million a span, copied once; their
    # entries by code (`joined_samples`); each day's timed responses, then its failed probes
    per_day = [part for pair in zip(timed_at, failed_at, strict=True) for part in pair]
    sizes = [len(part) for part in per_day]
    failed = np.tile([False, True], len(timed_at))
    sampled = pd.DataFrame({
        "entry_id": pd.Categorical.from_codes(
            np.concatenate(per_day or [np.empty(0, dtype=np.int64)]), entries),
        "total_ms": np.concatenate([part for ms, at in zip(timed_ms, failed_at, strict=True)
                                    for part in (ms, np.full(len(at), float(FAILED_PROBE_MS)))]
                                   or [np.empty(0)]),
        "failed": np.repeat(failed, sizes),
        "day": np.repeat(np.repeat(np.array(ordinals, dtype=np.int32), 2), sizes),
        "in_7d": np.repeat(np.repeat(np.array(weeks, dtype=bool), 2), sizes),
        "in_30d": True}, columns=SAMPLE_COLUMNS)
    return sampled, counted


def _coded(entries: str, wanted: Collection[str] | None,
           codes: dict[str, int]) -> tuple[np.ndarray | None, np.ndarray]:
    """The rows of a day's `entries` (ids joined by commas) to take (None: every one): those
    of `wanted` where it is given (the span's entries, as the store read them); and their
    entries' codes (`codes`, given as first met)."""
    ids = entries.split(",") if entries else []
    if wanted is None:
        taken, kept = None, ids
    else:
        taken = np.fromiter(map(wanted.__contains__, ids), dtype=bool, count=len(ids))
        kept = [entry_id for entry_id, take in zip(ids, taken, strict=True) if take]
    return taken, np.array([codes.setdefault(entry_id, len(codes)) for entry_id in kept],
                           dtype=np.int64)


def _by_code(entries: pd.Series) -> pd.Categorical:
    """`entries` as a categorical of plain Python texts (whatever dtype named them)."""
    named = pd.Categorical(entries)
    return pd.Categorical.from_codes(named.codes, pd.Index(named.categories, dtype=object))


def joined_samples(*parts: pd.DataFrame) -> pd.DataFrame:
    """The timed samples of `parts` in one frame, their entries one categorical column: a
    span's some 3.6 million samples name 50,000 entries, which Latency then finds by their
    codes rather than hashing every sample's name."""
    parts = tuple(part for part in parts if not part.empty)
    if not parts:
        return pd.DataFrame(columns=SAMPLE_COLUMNS).astype(SAMPLE_KINDS)
    entries = union_categoricals([_by_code(part["entry_id"]) for part in parts])
    return pd.DataFrame({
        "entry_id": entries,
        **{name: np.concatenate([part[name].to_numpy(dtype=kind) for part in parts])
           for name, kind in SAMPLE_KINDS.items()},
    }, columns=SAMPLE_COLUMNS)


def _combined_counts(*parts: pd.DataFrame) -> pd.DataFrame:
    frames = [part for part in parts if not part.empty]
    if not frames:
        return pd.DataFrame(columns=COUNT_COLUMNS)
    return (pd.concat(frames, ignore_index=True).groupby("entry_id", sort=True).sum()
            .reset_index().loc[:, COUNT_COLUMNS])


def _without(history: pd.DataFrame, entries: Collection[str]) -> pd.DataFrame:
    """`history` without the probes of `entries` (itself where it holds none of theirs)."""
    if not entries or history.empty:
        return history
    kept = ~history["entry_id"].isin(entries).to_numpy()
    return history if kept.all() else history.loc[kept]


def listed_history(session: Session, unlisted: Mapping[str, Unlisted],
                   since: datetime, until: datetime) -> pd.DataFrame:
    """The raw probes (`entries_history`) checked in [since, until] of the entries in
    `unlisted`, but those it names for each (`Unlisted`: of endpoints the entry no longer
    lists, or checked before its base address moved): what the score and the trend charts
    read of such an entry, whose day rollups hold every probe of a day as one."""
    history = entries_history(session, unlisted.keys(), since, until)
    dropped = {(entry_id, float(endpoint_id)) for entry_id, left in unlisted.items()
               for endpoint_id in left.endpoints}
    kept = np.fromiter((pair not in dropped for pair in zip(
        history["entry_id"].tolist(), history["endpoint_id"].tolist(), strict=True)),
        dtype=bool, count=len(history))
    moved = {entry_id: left.moved_at for entry_id, left in unlisted.items()
             if left.moved_at is not None}
    if moved:  # a probe of an entry not moved is compared with no moment (NaT): kept
        moved_at = pd.to_datetime(history["entry_id"].map(moved), utc=True)
        kept &= ~(history["checked_at"] < moved_at).to_numpy()
    return history.loc[kept]


def bounded_scores(
    session: Session, judged: Mapping[str, ContentScores], as_of: datetime,
    own_day: pd.DataFrame | None = None, span: EntrySpan = EVERY_ENTRY,
    unprobable: Mapping[str, str] | None = None,
) -> tuple[EntryScores, dict[str, dict[str, Any]]]:
    """Every entry's scores (of those in `judged`, with their content scores) and uptime as of
    `as_of`, as `score_entries` and `entry_uptimes` give them from the whole window, read from
    rollups and a few days of raw probes (of the entries in `span`). `own_day`: the probes of
    `as_of`'s day up to it (`day_history`), where the caller has read them already.

    `unprobable`: why each entry the catalogue gives no URL to probe any longer has none
    (`probe.no_targets`). Their probes are of addresses they no longer list, so none is read
    as evidence: such an entry is scored, and has no uptime, exactly as an entry never probed,
    its Latency saying why it will have none.

    Nor are the probes of an endpoint its entry no longer lists (a path the provider retired,
    answering 404), nor those checked before its base address moved (the old address dead,
    or answering 404): an entry with such probes in the window (`unlisted_probes`, few: those
    the curator edited) is read whole from its raw probes, kept for every day of the window,
    without them; its day rollups hold every probe of a day as one. One that moved and has no
    probe since is scored as one never probed."""
    reasons, unprobable = unprobable or {}, set(unprobable or ())
    raw_days, rolled = evidence_days(as_of)
    day, past_raw = as_of.date(), raw_days[1:]
    complete = complete_days(session, rolled + past_raw)
    # A past day a window starts inside is read raw whole only without complete rollups;
    # with them, raw from that start on, and from its rollups for the windows holding it.
    cut = [past for past in past_raw if past in complete]
    whole_raw = [day, *(past for past in past_raw if past not in complete),
                 *sorted(set(rolled) - complete)]
    read = {} if own_day is None else {day: own_day}
    raw = prepare_history(_raw_history(session, as_of, whole_raw, read, span), as_of)
    if cut:
        raw = pd.concat([raw, *(part for past in cut
                                if (part := _cut_day(session, past, as_of, span)) is not None)],
                        ignore_index=True)
    window_start = as_of - timedelta(days=WINDOW_DAYS)
    unlisted = {entry_id: left for entry_id, left in unlisted_probes(
        session, window_start, as_of, span).items()
        if entry_id in judged and entry_id not in unprobable}
    raw = _without(raw, unprobable | unlisted.keys())
    if unlisted:
        listed = listed_history(session, unlisted, window_start, as_of)
        raw = pd.concat([raw, prepare_history(listed, as_of)], ignore_index=True)
    oldest_held = day - timedelta(days=WINDOW_DAYS - 1)  # days before it no window holds whole
    from_rollups = sorted({*(d for d in rolled if d in complete),
                           *(d for d in cut if d >= oldest_held)})
    week_starts = day - timedelta(days=6)
    left_out = unprobable | unlisted.keys()
    wanted = judged.keys() - left_out if left_out else judged
    rolled_samples, rolled_counts = _rollup_evidence(session, from_rollups, week_starts, span,
                                                     wanted)
    samples = joined_samples(timed_samples(raw), rolled_samples)
    counts = _combined_counts(window_counts(raw), rolled_counts)
    # The parts go before Latency's percentiles are computed: the joined samples hold them
    # (some 3.6 million rows a span of 50,000 entries with 30 nights).
    del raw, rolled_samples, rolled_counts
    return scores_from_samples(judged, samples, reasons), uptimes_from_counts(counts)
