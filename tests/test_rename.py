"""An entry renamed with `formerIds` (SQLite and PostgreSQL): its former id's stored history
(probes, rollups and their kept evidence, states, lifecycle, events) becomes the new id's, so
its scores and uptime go on; a rename without it retires the old id and adds a new one."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlmodel import Session, col, delete, func, select

from pipeline.catalogue.entries import read_catalog
from pipeline.catalogue.ingest import HISTORY_TABLES, ingest_catalog
from pipeline.judging.changes import (
    CheckedState,
    recent_changes,
    recent_events,
    record_state_changes,
)
from pipeline.judging.content_scores import content_scores, store_content_scores
from pipeline.judging.evidence import bounded_scores
from pipeline.judging.rollup import keep_missing_evidence, roll_up_days
from pipeline.store.tables import (
    DailyEndpointRollup,
    DailyEntryRollup,
    EndpointRow,
    EntryEvent,
    EntryRow,
    ProbeRow,
    RolledDay,
    as_utc,
    day_bounds,
    make_engine,
    utc_text,
    utcnow,
)
from tests.conftest import WriteEntry, make_entry
from tests.test_evidence import TODAY, history  # noqa: F401 (a fixture)

AS_OF = TODAY.replace(hour=12)


def judged(session: Session) -> tuple[dict, dict]:
    """Every entry's scores and uptime as the score stage gives them."""
    store_content_scores(session)
    scores, uptimes = bounded_scores(session, content_scores(session), AS_OF)
    return {k: v.json_form() for k, v in scores.items()}, uptimes


def rows_of(session: Session, entry_id: str) -> dict[str, int]:
    """How many rows of each history table the entry has."""
    return {model.__tablename__: session.exec(
        select(func.count()).select_from(model).where(col(model.entry_id) == entry_id)).one()
        for model in HISTORY_TABLES}


def rename_file(data_dir: Path, write_entry: WriteEntry, old: str, new: str,
                former_ids: list[str] | None) -> None:
    (data_dir / "entries" / "weather" / f"{old}.yaml").unlink()
    write_entry(make_entry(id=new, formerIds=former_ids))


def ingest_again(session: Session, data_dir: Path, known: dict | None = None):
    entries = data_dir / "entries"
    return ingest_catalog(session, read_catalog([entries], entries, known=known))


def test_a_renamed_entry_keeps_its_history_scores_and_uptime(
    history: Session, data_dir: Path, write_entry: WriteEntry,  # noqa: F811
) -> None:
    scores, uptimes = judged(history)
    before = rows_of(history, "alpha")
    first_seen = history.get(EntryRow, "alpha").first_seen_at
    assert before["probe"] and before["daily_entry"] and scores["alpha"]["latency"] is not None
    rename_file(data_dir, write_entry, "alpha", "alpha-two", ["alpha"])

    summary = ingest_again(history, data_dir)
    assert summary.renamed == ["alpha → alpha-two"]
    assert summary.retired == summary.added == []
    history.expire_all()
    assert history.get(EntryRow, "alpha") is None
    assert rows_of(history, "alpha") == dict.fromkeys(before, 0)
    assert rows_of(history, "alpha-two") == {**before, "entry_event": before["entry_event"] + 1}
    assert history.get(EntryRow, "alpha-two").first_seen_at == first_seen
    kept = [day.evidence_entries.split(",") for day in history.exec(
        select(RolledDay).where(col(RolledDay.evidence).is_not(None)))]
    assert not any("alpha" in named for named in kept)  # the kept evidence names the new id
    assert any("alpha-two" in named for named in kept)

    new_scores, new_uptimes = judged(history)
    assert new_scores["alpha-two"] == scores["alpha"]
    assert new_uptimes["alpha-two"] == uptimes["alpha"]
    assert "alpha" not in new_scores and new_scores["beta"] == scores["beta"]

    event = history.exec(select(EntryEvent).where(EntryEvent.kind == "renamed")).one()
    assert (event.entry_id, event.from_value) == ("alpha-two", "alpha")
    published = [e.document() for e in recent_events(history, AS_OF - timedelta(days=1))
                 if e.kind != "release"]
    assert {"kind": "added", "entry": "alpha-two", "name": "Example Weather",
            "renamedFrom": "alpha", "at": published[0]["at"]} in published
    assert {"kind": "retired", "entry": "alpha", "name": "Example Weather",
            "renamedTo": "alpha-two", "at": published[0]["at"]} in published


def test_a_rename_without_former_ids_retires_the_old_id_and_starts_afresh(
    history: Session, data_dir: Path, write_entry: WriteEntry,  # noqa: F811
) -> None:
    before = rows_of(history, "alpha")
    rename_file(data_dir, write_entry, "alpha", "alpha-two", None)
    summary = ingest_again(history, data_dir)
    assert (summary.retired, summary.added, summary.renamed) == (["alpha"], ["alpha-two"], [])
    history.expire_all()
    assert history.get(EntryRow, "alpha").retired_at is not None
    assert rows_of(history, "alpha") == {**before, "entry_event": before["entry_event"] + 1}
    assert rows_of(history, "alpha-two")["probe"] == 0


def problems_of(data_dir: Path, known: dict | None = None) -> list[str]:
    entries = data_dir / "entries"
    return [str(problem) for problem in read_catalog([entries], entries, known=known).problems]


def test_former_ids_are_well_formed_retired_ids_each_claimed_once(
    data_dir: Path, write_entry: WriteEntry,
) -> None:
    """Each error is one line naming the file and its line, the entry and the field."""
    write_entry(make_entry(id="kept"))
    one = write_entry(make_entry(id="one", formerIds=["gone", "kept", "one"]))
    two = write_entry(make_entry(id="two", formerIds=["gone"]))
    three = write_entry(make_entry(id="three", formerIds=["old", "old"]))
    four = write_entry(make_entry(id="four", formerIds=["Not A Slug"]))
    found = problems_of(data_dir)
    assert all(re.match(r"\S+\.yaml:\d+: entry ", line) for line in found), found
    assert all("\n" not in line for line in found)
    assert sorted(re.sub(r"\.yaml:\d+: ", ".yaml: ", line) for line in found) == sorted([
        f"{one}: entry one: field formerIds[0]: former id 'gone' is also claimed by {two}: one "
        "entry alone takes it over [bad-former-id]",
        f"{one}: entry one: field formerIds[1]: former id 'kept' is the id of an entry of the "
        f"catalogue ({data_dir / 'entries' / 'weather' / 'kept.yaml'}): a former id must be "
        "retired, its file removed [bad-former-id]",
        f"{one}: entry one: field formerIds[2]: former id 'one' is the entry's own id "
        "[bad-former-id]",
        f"{two}: entry two: field formerIds[0]: former id 'gone' is also claimed by {one}: one "
        "entry alone takes it over [bad-former-id]",
        f"{three}: entry three: field formerIds[1]: former id 'old' is listed twice "
        "[bad-former-id]",
        f"{four}: entry four: field formerIds[0]: String should match pattern "
        "'^[a-z0-9]+(?:-[a-z0-9]+)*$' (got 'Not A Slug') [bad-format]"])


def test_a_claim_of_an_unchanged_file_still_counts_in_a_later_run(
    database_url: str, data_dir: Path, write_entry: WriteEntry,
) -> None:
    """A run does not parse a file whose hash is stored: the former ids it claims are kept in
    their column, so a new file claiming one of them is still refused, and both are named."""
    from pipeline.catalogue.ingest import stored_files
    from pipeline.store.tables import make_engine

    claimer = write_entry(make_entry(id="claimer", formerIds=["gone"]))
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            ingest_again(session, data_dir, known={})  # as a run reads: the hashes kept
            known = stored_files(session)
        assert known["weather/claimer.yaml"].former_ids == ("gone",)
        late = write_entry(make_entry(id="late", formerIds=["gone"]))
        found = problems_of(data_dir, known)
        assert sorted(re.sub(r"\.yaml:\d+: ", ".yaml: ", line) for line in found) == [
            f"{claimer}: entry claimer: field formerIds[0]: former id 'gone' is also claimed by "
            f"{late}: one entry alone takes it over [bad-former-id]",
            f"{late}: entry late: field formerIds[0]: former id 'gone' is also claimed by "
            f"{claimer}: one entry alone takes it over [bad-former-id]"]
    finally:
        engine.dispose()


def days_of(session: Session, entry_id: str) -> dict:
    """The entry's daily rollups as stored, by day."""
    return {row.day: row.model_dump(exclude={"entry_id"}) for row in session.exec(
        select(DailyEntryRollup).where(DailyEntryRollup.entry_id == entry_id))}


def of_days(session: Session, entry_id: str, days: set) -> dict[str, int]:
    """How many probes and URL rollups the entry has of `days`."""
    probes = sum(session.exec(select(func.count()).select_from(ProbeRow).where(
        ProbeRow.entry_id == entry_id, col(ProbeRow.checked_at) >= day_bounds(day)[0],
        col(ProbeRow.checked_at) <= day_bounds(day)[1])).one() for day in days)
    urls = session.exec(select(func.count()).select_from(DailyEndpointRollup).where(
        DailyEndpointRollup.entry_id == entry_id, col(DailyEndpointRollup.day).in_(days))).one()
    return {"probe": probes, "daily_endpoint": urls, "state_change": 0}


def test_former_ids_added_after_the_new_id_was_ingested_merge_both_histories(
    history: Session, data_dir: Path, write_entry: WriteEntry,  # noqa: F811
) -> None:
    """The old id's file removed and its id listed in `formerIds` of an entry with a history
    of its own: the old id's rows join it, its own winning a day (its rollups and the probes
    behind them), a state or an endpoint both have, and the old id's probes of an endpoint
    become probes of its endpoint alike."""
    first_seen = history.get(EntryRow, "alpha").first_seen_at
    history.get(EntryRow, "beta").first_seen_at = first_seen + timedelta(days=3)
    history.execute(delete(DailyEntryRollup).where(  # its rolled days began later
        DailyEntryRollup.entry_id == "beta", col(DailyEntryRollup.day) < (TODAY - timedelta(
            days=20)).date()))
    history.commit()
    old, own = rows_of(history, "alpha"), rows_of(history, "beta")
    old_days, own_days = days_of(history, "alpha"), days_of(history, "beta")
    assert old_days.keys() & own_days.keys() and old_days.keys() - own_days.keys()
    dropped = of_days(history, "alpha", old_days.keys() & own_days.keys())
    assert dropped["probe"] and dropped["daily_endpoint"]
    (data_dir / "entries" / "weather" / "alpha.yaml").unlink()
    write_entry(make_entry(id="beta", formerIds=["alpha"]))

    summary = ingest_again(history, data_dir)
    assert (summary.renamed, summary.retired, summary.updated) == (["alpha → beta"], [], ["beta"])
    history.expire_all()
    assert history.get(EntryRow, "alpha") is None
    assert rows_of(history, "alpha") == dict.fromkeys(old, 0)
    merged = rows_of(history, "beta")
    for unkeyed in ("probe", "state_change", "daily_endpoint"):  # each endpoint's URL its own
        assert merged[unkeyed] == old[unkeyed] - dropped[unkeyed] + own[unkeyed], unkeyed
    assert merged["entry_event"] == old["entry_event"] + own["entry_event"] + 1
    assert (merged["endpoint"], merged["entry_state"], merged["entry_lifecycle"]) == (
        own["endpoint"], own["entry_state"], own["entry_lifecycle"])
    assert days_of(history, "beta") == {**old_days, **own_days}  # its own day wins
    assert history.get(EntryRow, "beta").first_seen_at == first_seen
    strays = history.exec(select(func.count()).select_from(ProbeRow).join(
        EndpointRow, col(ProbeRow.endpoint_id) == EndpointRow.id).where(
        col(EndpointRow.entry_id) != ProbeRow.entry_id)).one()
    assert strays == 0  # every probe is of an endpoint of its own entry

    kept = {day.day: day.evidence_entries for day in history.exec(select(RolledDay))}
    assert not any("alpha" in (named or "").split(",") for named in kept.values())
    shared = old_days.keys() & own_days.keys() & kept.keys()
    assert shared and all(kept[day] is None for day in shared)  # read from its rows instead
    scores, uptimes = judged(history)
    assert set(keep_missing_evidence(history, TODAY.date())) & shared  # as the nightly upkeep
    assert judged(history) == (scores, uptimes)  # the evidence kept again says what rows say
    assert "alpha" not in scores


def test_a_successor_named_by_a_former_id_is_refused_naming_the_id_it_has_now(
    data_dir: Path, write_entry: WriteEntry,
) -> None:
    """A deprecated entry whose successor was renamed is told, in one line, which id to write:
    the successor is published, linked and judged by the id that has its files."""
    taker = write_entry(make_entry(id="steady-two", formerIds=["steady"]))
    old = write_entry(make_entry(id="old", deprecated={"successor": "steady"}))
    found = problems_of(data_dir)
    assert [re.sub(r"\.yaml:\d+: ", ".yaml: ", line) for line in found] == [
        f"{old}: entry old: field deprecated.successor: successor 'steady' is a former id of "
        f"'steady-two' ({taker}): name 'steady-two', the id it has now [unknown-successor]"]
    write_entry(make_entry(id="old", deprecated={"successor": "steady-two"}))
    assert problems_of(data_dir) == []


def test_a_release_built_in_memory_redirects_a_former_id_as_a_published_one_does(
    tmp_path: Path,
) -> None:
    """`build_release` with `write_release` and the pages drawn, and `stream_release` as a
    publish writes: the same `_redirects` and `_renamed.map`, the former id's document, page
    and Markdown each redirected to the new id's."""
    from pipeline.catalogue.entries import load_categories
    from pipeline.release.hosting import REDIRECTS_FILE, RENAMED_MAP, parse_redirects_file
    from pipeline.release.layout import entry_document, entry_markdown, entry_page
    from pipeline.release.publish import (
        assemble_entries,
        build_release,
        release_summary,
        stream_release,
        write_history,
    )
    from pipeline.release.site import write_site
    from pipeline.release.swap import write_release
    from tests.conftest import REPO

    base_url, version = "https://directory.test", "2.0.0+20261123.1"
    categories = load_categories(REPO / "data" / "categories.yaml")
    entries = assemble_entries([(entry["id"], entry) for entry in (
        make_entry(id="alpha-two", formerIds=["alpha"]), make_entry(id="beta"))])

    def pages(staging: Path, meta: dict, counts: dict) -> None:
        write_history(staging, release_summary(meta, counts, {}, categories), [], meta, [],
                      base_url=base_url)
        write_site(staging, base_url)  # after the history, which its pages link

    in_memory = write_release(tmp_path / "memory", build_release(
        entries, categories, version, AS_OF, base_url), categories, complete=pages)
    streamed = tmp_path / "streamed"
    stream_release(streamed, entries, categories, version, AS_OF, base_url, complete=pages)
    rules = parse_redirects_file((streamed / REDIRECTS_FILE).read_text())
    assert [(source, target) for source, target, status in rules if status == 301] == [
        (f"/{address('alpha')}", f"/{address('alpha-two')}")
        for address in (entry_document, entry_page, entry_markdown)]
    for name in (REDIRECTS_FILE, RENAMED_MAP):
        assert (in_memory / name).read_bytes() == (streamed / name).read_bytes(), name


def test_an_entry_renamed_twice_takes_over_every_former_id_still_stored(
    history: Session, data_dir: Path, write_entry: WriteEntry,  # noqa: F811
) -> None:
    """`formerIds: [alpha, beta]` where both are stored (the first rename made without
    `formerIds`): both histories carry over, the nearer id's row winning a key both hold, and
    its day (its rollups and the probes behind them) a day both were rolled up on."""
    old, near = rows_of(history, "alpha"), rows_of(history, "beta")
    old_days, near_days = days_of(history, "alpha"), days_of(history, "beta")
    dropped = of_days(history, "alpha", old_days.keys() & near_days.keys())
    for gone in ("alpha", "beta"):
        (data_dir / "entries" / "weather" / f"{gone}.yaml").unlink()
    write_entry(make_entry(id="delta", formerIds=["alpha", "beta"]))

    summary = ingest_again(history, data_dir)
    assert (summary.renamed, summary.retired, summary.added) == (
        ["beta → delta", "alpha → delta"], [], [])
    history.expire_all()
    assert history.get(EntryRow, "alpha") is None and history.get(EntryRow, "beta") is None
    taken = rows_of(history, "delta")
    assert taken["probe"] == old["probe"] - dropped["probe"] + near["probe"]
    assert taken["entry_event"] == old["entry_event"] + near["entry_event"] + 2
    assert days_of(history, "delta") == {**old_days, **near_days}


def told(session: Session, data_dir: Path, at) -> list[dict]:
    """The catalogue events an ingest at `at` publishes (`recent_events`), as documents."""
    entries = data_dir / "entries"
    ingest_catalog(session, read_catalog([entries], entries), now=at)
    return sorted((event.document() for event in recent_events(session, at)
                   if event.kind != "release"), key=lambda document: document["entry"])


def test_a_rename_publishes_only_what_a_reader_was_not_told_before(
    data_dir: Path, write_entry: WriteEntry, ingested_store,
) -> None:
    """`formerIds` added where the ids were published apart for a while: an id retired long
    ago is not told retired again, nor an id published long since told added again; an entry
    back from retirement by a rename is told added once, naming its former id."""
    for entry_id in ("old", "twin", "kept", "back"):
        write_entry(make_entry(id=entry_id))
    session = ingested_store()
    weather = data_dir / "entries" / "weather"
    rename_file(data_dir, write_entry, "old", "new", None)  # the old id retired, not renamed
    (weather / "back.yaml").unlink()
    day = utcnow() + timedelta(days=1)  # after the events of the first ingest
    assert [(d["kind"], d["entry"]) for d in told(session, data_dir, day)] == [
        ("retired", "back"), ("added", "new"), ("retired", "old")]

    def at(days: int):
        return day + timedelta(days=days)

    write_entry(make_entry(id="new", formerIds=["old"]))  # both told long ago
    assert told(session, data_dir, at(1)) == []
    (weather / "twin.yaml").unlink()  # a duplicate merged into an entry published long since
    write_entry(make_entry(id="kept", formerIds=["twin"]))
    assert told(session, data_dir, at(2)) == [
        {"kind": "retired", "entry": "twin", "name": "Example Weather", "renamedTo": "kept",
         "at": utc_text(at(2))}]
    write_entry(make_entry(id="back", formerIds=["kept"]))  # back, taking over a published id
    (weather / "kept.yaml").unlink()
    assert told(session, data_dir, at(3)) == [
        {"kind": "added", "entry": "back", "name": "Example Weather", "renamedFrom": "kept",
         "at": utc_text(at(3))},
        {"kind": "retired", "entry": "kept", "name": "Example Weather", "renamedTo": "back",
         "at": utc_text(at(3))}]


FIGURES = ("probes", "responses", "successes", "live", "live_share", "p50_ms", "p90_ms",
           "timed_ms")


def figures_of(session: Session, entry_id: str, days: list) -> dict:
    """The entry's daily figures and its URLs', as stored, of `days`."""
    urls = {(row.day, row.url): [getattr(row, name) for name in FIGURES[:-1]]
            for row in session.exec(select(DailyEndpointRollup).where(
                DailyEndpointRollup.entry_id == entry_id,
                col(DailyEndpointRollup.day).in_(days)))}
    return {"entry": {day: [row[name] for name in FIGURES] for day, row in
                      days_of(session, entry_id).items() if day in days}, "urls": urls}


def test_a_day_both_ids_were_rolled_up_on_rolled_up_again_gives_the_figures_merged(
    history: Session, data_dir: Path, write_entry: WriteEntry,  # noqa: F811
) -> None:
    """After a merge, a backfill of a day both ids had rolled up counts the probes the kept
    rollup counted (the taker's own), not the former's too, which the merge dropped."""
    shared = sorted(days_of(history, "alpha").keys() & days_of(history, "beta").keys())
    both = [day for day in shared if all(
        days_of(history, entry_id)[day]["probes"] for entry_id in ("alpha", "beta"))][-3:]
    assert len(both) == 3  # days both ids were probed on
    own = figures_of(history, "beta", both)
    (data_dir / "entries" / "weather" / "alpha.yaml").unlink()
    write_entry(make_entry(id="beta", formerIds=["alpha"]))
    ingest_again(history, data_dir)
    history.expire_all()
    assert figures_of(history, "beta", both) == own  # its own day kept whole
    roll_up_days(history, both, entry_ids=["beta"])
    history.expire_all()
    assert figures_of(history, "beta", both) == own


def published(session: Session, since) -> list[dict]:
    """The state changes and catalogue events `api/changes.json` publishes from `since`,
    oldest first."""
    told = [*recent_changes(session, since), *(event for event in recent_events(session, since)
                                               if event.kind != "release")]
    return sorted((item.document() for item in told),
                  key=lambda document: (document["at"], document["entry"],
                                        document.get("kind", "state")))


def check_states(session: Session, states: dict[str, str], at) -> None:
    """A night's checked states, as the publish stage records them."""
    record_state_changes(session, {entry_id: CheckedState(state, at)
                                   for entry_id, state in states.items()}, at)


def judge_lifecycles(session: Session, failed: dict[str, int], at) -> None:
    """A night's lifecycle judgements: each entry of `failed` with that many of its two targets
    failed (degraded where any did), as the publish stage records them."""
    from pipeline.judging.changes import record_lifecycles
    from pipeline.judging.health import LifecycleRules, RunVerdict

    record_lifecycles(session, sorted(failed),
                      {entry_id: RunVerdict(None, at, targets=2, failed=count, dead=0)
                       for entry_id, count in failed.items()}, {}, at, LifecycleRules())


def test_the_events_of_an_id_merged_long_after_it_retired_keep_telling_of_that_id(
    data_dir: Path, write_entry: WriteEntry, ingested_store,
) -> None:
    """`formerIds: [old]` added to a live entry long after `old` was retired: old's events
    (added, a lifecycle transition, retired) and state changes join the live entry's history,
    but are published as they were, of `old`, and named `old` since (the store keeps no name of
    an id taken over): the live entry is never told retired, nor added again, nor to have
    stopped answering when old did."""
    for entry_id in ("old", "live"):
        write_entry(make_entry(id=entry_id))
    start = utcnow()
    session = ingested_store()

    def at(days: int):
        return start + timedelta(days=days)

    judge_lifecycles(session, {"old": 0, "live": 0}, at(1))
    check_states(session, {"old": "live", "live": "live"}, at(1))
    judge_lifecycles(session, {"old": 1, "live": 0}, at(2))  # old: active → degraded
    check_states(session, {"old": "unreachable", "live": "live"}, at(2))
    (data_dir / "entries" / "weather" / "old.yaml").unlink()
    assert [(d["kind"], d["entry"]) for d in told(session, data_dir, at(3))] == [
        ("retired", "old")]
    judge_lifecycles(session, {"live": 1}, at(4))  # live: active → degraded, its own
    check_states(session, {"live": "online"}, at(4))
    before = published(session, start - timedelta(minutes=1))
    assert [(d.get("kind", "state"), d["entry"]) for d in before] == [
        ("added", "live"), ("added", "old"), ("lifecycle", "old"), ("state", "old"),
        ("retired", "old"), ("lifecycle", "live"), ("state", "live")]

    write_entry(make_entry(id="live", formerIds=["old"]))
    assert told(session, data_dir, at(6)) == []  # both told long ago
    session.expire_all()
    assert session.get(EntryRow, "old") is None
    assert len(session.exec(select(EntryEvent).where(EntryEvent.entry_id == "live")).all()) == 6
    assert published(session, start - timedelta(minutes=1)) == [
        document | {"name": "old"} if document["entry"] == "old" else document
        for document in before]


def test_an_entry_renamed_twice_tells_each_rename_and_each_past_event_as_it_was_told(
    data_dir: Path, write_entry: WriteEntry, ingested_store,
) -> None:
    """`first` renamed `second`, then `third` (`formerIds: [first, second]`): every event told
    before the second rename is told after it as it was (of `first`, of `second`, and the
    first rename naming both), each moved by a rename named by the id it tells of, and the
    second rename adds its own two halves."""
    write_entry(make_entry(id="first"))
    start = utcnow()
    session = ingested_store()

    def at(days: int):
        return start + timedelta(days=days)

    judge_lifecycles(session, {"first": 0}, at(1))
    judge_lifecycles(session, {"first": 1}, at(2))  # first: active → degraded
    rename_file(data_dir, write_entry, "first", "second", ["first"])
    assert len(told(session, data_dir, at(3))) == 2
    judge_lifecycles(session, {"second": 0}, at(4))  # second: degraded → active
    before = published(session, start - timedelta(minutes=1))
    assert [(d["kind"], d["entry"], d.get("renamedFrom", d.get("renamedTo"))) for d in before] == [
        ("added", "first", None), ("lifecycle", "first", None),
        ("retired", "first", "second"), ("added", "second", "first"),
        ("lifecycle", "second", None)]

    rename_file(data_dir, write_entry, "second", "third", ["first", "second"])
    assert told(session, data_dir, at(5)) == [
        {"kind": "retired", "entry": "second", "name": "Example Weather", "renamedTo": "third",
         "at": utc_text(at(5))},
        {"kind": "added", "entry": "third", "name": "Example Weather", "renamedFrom": "second",
         "at": utc_text(at(5))}]
    assert [d["name"] for d in before] == ["first", "first", *["Example Weather"] * 3]
    after = published(session, start - timedelta(minutes=1))
    assert [document for document in after if document["at"] < utc_text(at(5))] == [
        document | {"name": "second"} if document["name"] == "Example Weather" else document
        for document in before]


def test_a_renamed_entry_holds_its_base_address_as_the_history_it_takes_over_says(
    database_url: str, data_dir: Path, write_entry: WriteEntry,
) -> None:
    """An id taking over a former id's history holds its base address from when the former
    did, where both list the same one (the former's probes are of it); where the former's
    was another, the probes taken over are of an address the entry moved from, and it holds
    its own from the rename, also when it had a history of its own."""
    entries = data_dir / "entries"
    moved = {"baseUrl": "https://api.new.example/v1",
             "sampleRequest": 'curl "https://api.new.example/v1/forecast"'}
    first, second, renamed = (datetime(2026, 11, day, 4, tzinfo=UTC) for day in (1, 2, 3))
    engine = make_engine(database_url)
    try:
        def ingested(now: datetime) -> dict[str, datetime | None]:
            with Session(engine) as session:
                ingest_catalog(session, read_catalog([entries], entries), now=now)
                return {entry_id: since and as_utc(since) for entry_id, since in
                        session.exec(select(EntryRow.id, EntryRow.base_url_since))}

        for entry_id in ("same", "other", "moved", "own", "merged"):
            write_entry(make_entry(id=entry_id))
        ingested(first)
        for entry_id in ("moved", "merged"):
            write_entry(make_entry(id=entry_id, **moved))
        assert ingested(second)["moved"] == second
        for old, new, address in (("same", "same-two", {}), ("other", "other-two", moved),
                                  ("moved", "moved-two", moved), ("merged", "own", {})):
            (entries / "weather" / f"{old}.yaml").unlink()
            write_entry(make_entry(id=new, formerIds=[old], **address))
        assert ingested(renamed) == {"same-two": None, "other-two": renamed,
                                     "moved-two": second, "own": renamed}
    finally:
        engine.dispose()
