"""The end-to-end nightly benchmark's harness: it times the calls the flow really makes, draws
the host mix it says, bounds the probing as the limits allow, sees every process's memory,
and a tiny run on the loopback fake internet prints every stage and every goal."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import json
import os
import re
import sqlite3
import subprocess
import sys
import types
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pytest

from bench.makespan import Host, draw_hosts, lower_bound, phased_bound
from bench.nightly import (
    BESIDE_PROBING,
    FLOW_MODULE,
    SHARDED,
    SHARDS_MODULE,
    STAGES,
    STAGES_MODULE,
    TIMED,
)
from bench.probe import RETRY_AFTER
from bench.processes import ProcessWatch
from bench.stage_clock import StageClock
from pipeline.probing.probe import ProbeSettings
from tests.conftest import REPO


def test_every_timed_call_is_one_the_flow_makes_through_its_module() -> None:
    """A renamed stage, or one called another way, would silently drop out of the figures."""
    sources = {name: inspect.getsource(importlib.import_module(name))
               for name in (STAGES_MODULE, FLOW_MODULE)}
    for module, attribute, name in TIMED:
        assert callable(getattr(importlib.import_module(module), attribute, None)), attribute
        if name in STAGES + BESIDE_PROBING:  # the flow calls each stage as stages.<function>
            assert re.search(rf"stages\.{attribute}[(,]", sources[FLOW_MODULE]), attribute
        else:  # a step of a stage, or bookkeeping: called by its bare name in that module
            assert re.search(rf"(?<!def )(?<![.\w]){attribute}\(", sources[module]), attribute
    sharded = inspect.getsource(importlib.import_module(SHARDS_MODULE))
    for module, attribute, _name in SHARDED:  # the sharded probe stage's calls in the flow
        assert module == STAGES_MODULE and re.search(rf"stages\.{attribute}[(,]", sharded)
    # the sharded stage is awaited as the "probe" stage, which the bench times as a whole
    assert "probing = probe_in_shards(run_id)" in sources[FLOW_MODULE]
    assert 'run_stage("probe", probing)' in sources[FLOW_MODULE]


def test_the_host_mix_follows_its_shares_and_keeps_the_makespan_draw() -> None:
    names = [f"api-{number}.example.net" for number in range(20_000)]
    hosts = draw_hosts(names, 0.01, 0.02, seed=3, statuses={401: 0.10, 429: 0.05})
    kinds = Counter((host.kind, host.status) for host in hosts)
    for key, share in {("hangs", 200): 0.01, ("refuses", 200): 0.02, ("answers", 401): 0.10,
                       ("limited", 429): 0.05, ("answers", 200): 0.82}.items():
        assert abs(kinds[key] / len(hosts) - share) < 0.01, (key, kinds)
    assert all(0.020 <= host.latency <= 0.800 for host in hosts)
    plain = draw_hosts(names, 0.01, 0.02, seed=3)  # as bench.makespan draws
    assert [h.latency for h in plain] == [h.latency for h in hosts]
    assert {h.kind for h in plain} == {"answers", "hangs", "refuses"}


def test_the_lower_bound_counts_each_hosts_urls_retries_and_retry_after() -> None:
    settings = ProbeSettings(global_concurrency=4, per_host_concurrency=2, per_host_interval=0.5,
                             total_timeout=3.0, max_attempts=3, backoff_base=0.5)
    limited = Host("limited.example", "limited", 0.1, 429)
    bound = lower_bound([limited], [1], settings)
    assert bound["timeout x attempts"] == pytest.approx(3 * 0.1 + 2 * RETRY_AFTER)
    assert bound["busiest host"] == pytest.approx(3 * 0.1 + 2 * RETRY_AFTER)
    answers, hangs = Host("a.example", "answers", 0.2), Host("h.example", "hangs", 0.2)
    bound = lower_bound([answers, hangs], [4, 1], settings)
    assert bound["work / global"] == pytest.approx((4 * 0.2 + 3 * 3.0) / 4)
    assert bound["timeout x attempts"] == pytest.approx(3 * 3.0 + 0.25 + 0.5)
    assert lower_bound([answers], 4, settings) == lower_bound([answers], [4], settings)


def test_second_looks_are_a_phase_after_the_first_looks_not_more_work_in_it() -> None:
    settings = ProbeSettings(global_concurrency=4, per_host_concurrency=2, per_host_interval=0.5,
                             total_timeout=3.0, max_attempts=1, backoff_base=0.5)
    answers, hangs = Host("a.example", "answers", 0.2), Host("h.example", "hangs", 0.2)
    first = [(answers, 4), (hangs, 2)]
    bound, floor = phased_bound(first, [], settings)
    assert bound == lower_bound([answers, hangs], [4, 2], settings)
    assert floor == max(bound.values())
    bound, floor = phased_bound(first, [(hangs, 2)], settings)
    again = lower_bound([hangs], [2], settings)
    assert bound["then second looks: timeout x attempts"] == again["timeout x attempts"]
    assert floor == pytest.approx(max(lower_bound([answers, hangs], [4, 2], settings).values())
                                  + max(again.values()))


def test_the_process_watch_sees_a_childs_peak_memory_and_cpu() -> None:
    script = "import time; x = b'x' * (160 << 20); del x; sum(range(10**7)); time.sleep(0.6)"
    watch = ProcessWatch([os.getpid()], interval=0.1).start()
    subprocess.run([sys.executable, "-c", script], check=True)
    seen = watch.stop()
    child = [w for w in seen if "time.sleep" in w.command]
    assert len(child) == 1 and os.getpid() in child[0].ancestors
    assert child[0].peak_rss_mib >= 150  # freed before the end: only the peak remembers it
    assert child[0].cpu_used > 0


def test_the_stage_clock_times_functions_and_coroutines_where_they_are_called() -> None:
    module = types.ModuleType("stages")
    module.work = lambda n: sum(range(n))

    async def wait(seconds: float) -> str:
        await asyncio.sleep(seconds)
        return "waited"

    module.wait = wait
    clock = StageClock(peaks=frozenset({"work"}))
    clock.wrap(module, "work")
    clock.wrap(module, "wait", "waiting")
    assert module.work(10**6) == sum(range(10**6))
    assert asyncio.run(module.wait(0.2)) == "waited"
    work, waiting = clock.timings["work"], clock.timings["waiting"]
    assert work.calls == waiting.calls == 1 and work.cpu > 0 and work.peak_rss_mib > 0
    assert waiting.wall >= 0.2 > waiting.cpu and waiting.peak_rss_mib is None


@pytest.mark.prefect
@pytest.mark.parametrize("shards", [1, 2])
def test_a_tiny_run_prints_every_stage_and_goal_for_two_nights(tmp_path: Path,
                                                                 shards: int) -> None:
    first_day = datetime.now(UTC).date()
    done = subprocess.run(
        [sys.executable, "-m", "bench.nightly", "--entries", "20", "--nights", "2",
         "--hang-share", "0", "--refuse-share", "0.2", "--workdir", str(tmp_path),
         "--max-seconds", "240", "--shards", str(shards)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env=os.environ | {"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for line in ("ingest ", "reading files", "storing", "probe ", "planning", "probing ",
                 "recording", "score ", "publish ", "release and pages", "rollup ",
                 "beside the probe", "run record", "Prefect and the rest", "waiting on the network",
                 "everything else", "ingest of the unchanged catalogue",
                 "peak RSS of any process", "probe makespan", "lower bound"):
        assert line in out, line
    assert out.count("\nnight ") == 2
    assert "flow " in out and "prefect server" in out and "fake internet (harness)" in out
    assert "'unreachable refused'" in out and "'live'" in out
    figures = json.loads((tmp_path / "sqlite-20" / "figures.json").read_text())
    assert [night["published"] for night in figures["nights"]] == [20, 20]
    assert figures["nights"][1]["ingest"]["unchanged"] == 20
    for night in figures["nights"]:
        probing = night["probing"]
        assert probing["limits"]["global"] == 64 and probing["limits"]["shards"] == shards
        if shards == 1:
            assert probing["shards"] == [] and night["timings"]["probe: probing"]["calls"] == 1
            continue
        assert "probe: probing" not in night["timings"]  # not in the flow's process
        assert [shard["shard"] for shard in probing["shards"]] == [0, 1]
        assert all(shard["cpu"] > 0 and shard["wall"] > 0 for shard in probing["shards"])
        assert {"live", "unreachable"} <= set().union(*(s["outcomes"] for s in probing["shards"]))
        assert night["timings"]["probe"]["wall"] > max(s["wall"] for s in probing["shards"])
    if shards > 1:
        assert out.count("  probe shard ") == 4 and "a process of its own" in out
        assert "planning, stored by shard" in out
        return
    # One night more on the same store, catalogue and live release, numbered after the two.
    files = sorted((tmp_path / "sqlite-20" / "catalogue" / "entries").rglob("*.yaml"))
    inodes = [file.stat().st_ino for file in files]
    done = subprocess.run(
        [sys.executable, "-m", "bench.nightly", "--entries", "20", "--nights", "1",
         "--hang-share", "0", "--refuse-share", "0.2", "--workdir", str(tmp_path),
         "--max-seconds", "240", "--resume"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env=os.environ | {"PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\nnight 3" in done.stdout and "\nnight 1" not in done.stdout
    assert "catalogue kept" in done.stdout and [file.stat().st_ino for file in files] == inodes
    figures = json.loads((tmp_path / "sqlite-20" / "figures.json").read_text())
    assert [night["published"] for night in figures["nights"]] == [20, 20, 20]
    assert figures["nights"][2]["ingest"]["unchanged"] == 20
    assert figures["nights"][2]["run"] > figures["nights"][1]["run"]
    # The store was aged a day before each night after the first: each night has a day of its own,
    # the one after the night before's (two after it where midnight passed between the two).
    midnights = (datetime.now(UTC).date() - first_day).days
    with sqlite3.connect(tmp_path / "sqlite-20" / "store.db") as store:
        started = [date.fromisoformat(day) for (day,) in store.execute(
            "SELECT date(started_at) FROM pipeline_run ORDER BY id")]
    gaps = [(later - earlier).days for earlier, later in itertools.pairwise(started)]
    assert min(gaps) >= 1 and sum(gaps) == len(gaps) + midnights, (gaps, midnights)


def test_aging_the_store_moves_every_time_and_day_back_and_keeps_the_rest(
        write_entry, ingested_store, database_url: str) -> None:
    from sqlmodel import Session, select

    from bench.nightly import age_store
    from pipeline.store.history import plan_targets, record_probes
    from pipeline.store.tables import (
        DailyEntryRollup,
        EntryRow,
        ProbeRow,
        RolledDay,
        as_utc,
        make_engine,
        start_run,
    )
    from tests.conftest import make_entry
    from tests.test_history import result

    write_entry(make_entry())
    session = ingested_store()
    url = plan_targets(session)[0].url
    today, yesterday = date(2026, 11, 27), date(2026, 11, 26)
    probed = datetime(2026, 11, 27, 3, 4, 5, 999901, tzinfo=UTC)  # a fraction SQLite would round
    record_probes(session, start_run(session, "nightly"), [result(url, "live", 200, at=probed)])
    for day in (today, yesterday):  # neighbouring keys: moving one onto the other must not clash
        session.add(DailyEntryRollup(day=day, entry_id="example-weather", probes=day.day))
        session.add(RolledDay(day=day, rolled_at=probed))
    session.commit()
    seen = as_utc(session.exec(select(EntryRow)).one().first_seen_at)
    session.close()

    assert age_store(database_url) > 0
    with Session(make_engine(database_url)) as aged:
        assert as_utc(aged.exec(select(ProbeRow)).one().checked_at) == probed - timedelta(days=1)
        assert as_utc(aged.exec(select(EntryRow)).one().first_seen_at) == seen - timedelta(days=1)
        rollups = aged.exec(select(DailyEntryRollup).order_by(DailyEntryRollup.day)).all()
        assert [(row.day, row.probes) for row in rollups] == [
            (yesterday - timedelta(days=1), 26), (yesterday, 27)]
        assert [row.day for row in aged.exec(select(RolledDay).order_by(RolledDay.day))] == [
            yesterday - timedelta(days=1), yesterday]
        aged.get_bind().dispose()
