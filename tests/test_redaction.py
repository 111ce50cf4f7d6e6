"""A password in a URL's userinfo never surfaces: not in probe results, errors, logs or the
store, and an entry that carries one is refused before anything is published."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from sqlmodel import Session, select

from pipeline.catalogue.entries import read_catalog
from pipeline.probing.probe import (
    ProbeSettings,
    ProbeTarget,
    probe_all,
    probe_targets_for,
    redact_userinfo,
)
from pipeline.store.history import record_probes
from pipeline.store.tables import EntryRow, ProbeRow, make_engine, start_run, utcnow
from tests.conftest import WriteEntry, make_entry
from tests.fake_internet import FakeServer, closed_port

SECRET = "s3cret-word"


def test_redact_userinfo_removes_every_credential() -> None:
    text = f"GET https://me:{SECRET}@api.example.com/v1?x=1 then ftp://{SECRET}@h/ and a@b.c"
    assert redact_userinfo(text) == (
        "GET https://api.example.com/v1?x=1 then ftp://h/ and a@b.c")


def test_targets_planned_from_a_base_url_with_credentials_hold_none() -> None:
    targets, _ = probe_targets_for(f"https://me:{SECRET}@api.example.com/v1",
                                   [(1, "GET", "/forecast")])
    assert [t.url for t in targets] == ["https://api.example.com/v1/forecast"]


async def test_results_errors_logs_and_the_store_hold_no_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    server = await FakeServer().start()
    settings = ProbeSettings(allow_private=True, per_host_interval=0, max_attempts=1,
                             confirm_failures=False,
                             connect_timeout=1, total_timeout=2)
    refused = f"http://me:{SECRET}@127.0.0.1:{closed_port()}/x"
    answered = server.url("/ok").replace("http://", f"http://me:{SECRET}@")
    try:
        with caplog.at_level(logging.DEBUG):
            results = await probe_all(
                [ProbeTarget(answered, "entry"), ProbeTarget(refused, "entry")], settings)
    finally:
        await server.close()
    assert [r.outcome for r in results] == ["live", "unreachable"]
    engine = make_engine(f"sqlite:///{tmp_path / 'apidir.db'}")
    with Session(engine) as session:
        now = utcnow()
        session.add(EntryRow(id="entry", category="ai", name="E", content={}, content_hash="h",
                             source_file="f", first_seen_at=now, updated_at=now))
        session.commit()
        record_probes(session, start_run(session, "nightly"), results)
        stored = session.exec(select(ProbeRow)).all()
    engine.dispose()
    seen = " ".join(f"{r.url} {r.final_url} {r.error}" for r in stored) + caplog.text
    seen += " ".join(f"{r.url} {r.final_url} {r.error}" for r in results)
    assert len(stored) == 2 and SECRET not in seen and "me:" not in seen


def test_an_entry_with_credentials_in_a_url_is_refused(
    write_entry: WriteEntry, data_dir: Path
) -> None:
    write_entry(make_entry(baseUrl=f"https://me:{SECRET}@api.example.com/v1"))
    entries = data_dir / "entries"
    report = read_catalog([entries], entries)
    assert report.entries == {}
    assert ("baseUrl", "url-credentials") in {(p.field, p.rule) for p in report.problems}
