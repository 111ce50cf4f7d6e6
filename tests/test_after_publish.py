"""`APIDIR_AFTER_PUBLISH`: the operator's command run each time a release goes live. nginx reads
a release's renamed addresses (`_renamed.map`) only as it loads, so a rename published while it
runs is served once the command reloads it; a command that fails, hangs or is missing fails the
publish in one line, the new release live. `apidir serve` needs no command: it reads the host
files of each release that goes live."""

from __future__ import annotations

import http.client
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from sqlmodel import Session

from pipeline.catalogue.entries import read_catalog
from pipeline.catalogue.ingest import ingest_catalog
from pipeline.release import after_publish
from pipeline.release.after_publish import AfterPublishFailed, run_after_publish
from pipeline.release.swap import lock_file
from tests.conftest import REPO, WriteEntry, make_entry
from tests.static_host import run_nginx, run_serve
from tests.test_cli_publish import apidir_publish

pytestmark = pytest.mark.backends("sqlite")  # the host's side of a publish: any store alike

OLD, NEW = "example-weather", "example-weather-two"


def status_of(base_url: str, path: str) -> tuple[int, str | None]:
    address = urlsplit(base_url)
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        connection.request("GET", path)
        response = connection.getresponse()
        response.read()
        return response.status, response.getheader("Location")
    finally:
        connection.close()


def rename(session: Session, data_dir: Path, write_entry: WriteEntry) -> None:
    """The entry's file renamed, its new id claiming the old one, and ingested."""
    (data_dir / "entries" / "weather" / f"{OLD}.yaml").unlink()
    write_entry(make_entry(id=NEW, formerIds=[OLD]))
    entries = data_dir / "entries"
    assert ingest_catalog(session, read_catalog([entries], entries)).renamed == [f"{OLD} → {NEW}"]


def published(settings_env: dict[str, str], write_entry: WriteEntry,
              ingested_store) -> tuple[Session, Path]:
    """The one entry ingested and published (no command): the store's session and the output
    folder."""
    write_entry()
    session = ingested_store()
    assert apidir_publish().returncode == 0
    return session, Path(settings_env["APIDIR_OUTPUT_DIR"])


def test_a_rename_published_while_nginx_runs_is_served_once_the_command_reloads_it(
        settings_env: dict[str, str], write_entry: WriteEntry, ingested_store,
        data_dir: Path, tmp_path: Path) -> None:
    session, output = published(settings_env, write_entry, ingested_store)
    former = f"/api/apis/{OLD}.json"
    with run_nginx(output, tmp_path / "nginx") as base_url:
        assert status_of(base_url, former)[0] == 200
        rename(session, data_dir, write_entry)
        done = apidir_publish()  # no command: nginx still holds the map it loaded
        assert done.returncode == 0, done.stderr
        assert f"{former}  /api/apis/{NEW}.json  301" in (output / "_redirects").read_text()
        assert status_of(base_url, former)[0] == 404

        work = tmp_path / "nginx"
        reload = shlex.join(["nginx", "-p", str(work), "-c", str(work / "nginx.conf"),
                             "-s", "reload"])
        done = apidir_publish(APIDIR_AFTER_PUBLISH=reload)
        assert done.returncode == 0, done.stderr
        # the reload is asked for; the new workers take over as the old ones finish
        for _ in range(100):
            status, location = status_of(base_url, former)
            if status == 301:
                break
            subprocess.run(["sleep", "0.1"], check=True)
        assert (status, urlsplit(location or "").path) == (301, f"/api/apis/{NEW}.json")


def test_the_command_is_given_the_output_folder_and_runs_under_the_publish_lock(
        settings_env: dict[str, str], write_entry: WriteEntry, ingested_store,
        tmp_path: Path) -> None:
    """It runs once the release is live, while the publisher still holds the lock, so a
    second publisher's command never runs beside it."""
    write_entry()
    ingested_store()
    output = Path(settings_env["APIDIR_OUTPUT_DIR"])
    seen = tmp_path / "seen"
    script = (f'echo "$APIDIR_PUBLISHED" > {shlex.quote(str(seen))}; '
              f'test -s "$APIDIR_PUBLISHED/api/apis.json" && '
              f'! flock -n {shlex.quote(str(lock_file(output)))} true')
    done = apidir_publish(APIDIR_AFTER_PUBLISH=shlex.join(["sh", "-c", script]))
    assert done.returncode == 0, done.stderr
    assert seen.read_text().strip() == str(output)


@pytest.mark.parametrize("command, why", [
    ("sh -c 'echo checking; echo \"nginx: [error] invalid PID number \\\"\\\"\" >&2; exit 1'",
     'exit status 1: nginx: [error] invalid PID number ""'),
    ("no-such-command-anywhere --reload", "No such file or directory"),
    ("sh -c 'kill -TERM $$'", "killed by signal 15"),
    ("sh -c 'exit 3'", "exit status 3"),
])
def test_a_failing_command_is_told_in_one_line_naming_it(tmp_path: Path, command: str,
                                                         why: str) -> None:
    with pytest.raises(AfterPublishFailed) as failed:
        run_after_publish(tmp_path, command)
    assert str(failed.value) == (
        f"the new release is live at {tmp_path}, but the command APIDIR_AFTER_PUBLISH names "
        f"({command}) failed: {why}")


def test_a_command_that_hangs_is_stopped_with_what_it_started(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run under the publish lock, a command that never ends would hold every later publish:
    it is stopped, and so is the process it left behind in its session."""
    monkeypatch.setattr(after_publish, "AFTER_PUBLISH_SECONDS", 1.0)
    pid_file = tmp_path / "child.pid"
    command = shlex.join(["sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"])
    with pytest.raises(AfterPublishFailed, match="did not finish within 1 s and was stopped"):
        run_after_publish(tmp_path, command)
    child = int(pid_file.read_text())
    for _ in range(50):  # killed; gone once its parent (init, in a container this runner) reaps it
        try:
            state = Path(f"/proc/{child}/stat").read_text().split()[2]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        subprocess.run(["sleep", "0.1"], check=True)
    else:
        pytest.fail(f"the command's child {child} still runs")


def test_a_failed_command_fails_the_publish_in_one_line_the_release_live(
        settings_env: dict[str, str], write_entry: WriteEntry, ingested_store) -> None:
    write_entry()
    ingested_store()
    output = Path(settings_env["APIDIR_OUTPUT_DIR"])
    done = apidir_publish(APIDIR_AFTER_PUBLISH="sh -c 'echo purge refused >&2; exit 7'")
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1:] == [
        f"apidir: the new release is live at {output}, but the command APIDIR_AFTER_PUBLISH "
        "names (sh -c 'echo purge refused >&2; exit 7') failed: exit status 7: purge refused"]
    assert "Traceback" not in done.stderr
    entry, = json.loads((output / "api" / "apis.json").read_text())["apis"]
    assert entry["id"] == OLD


def test_a_command_line_that_is_not_one_is_a_settings_error(
        settings_env: dict[str, str]) -> None:
    done = apidir_publish(APIDIR_AFTER_PUBLISH="nginx -s 'reload")
    assert done.returncode != 0
    assert done.stderr.splitlines()[-1:] == [
        "apidir: invalid setting: APIDIR_AFTER_PUBLISH: Value error, not a command line: "
        "No closing quotation"]


def test_a_run_whose_command_fails_is_failed_in_that_line_and_publishes_once(
        settings_env: dict[str, str], write_entry: WriteEntry, ingested_store,
        tmp_path: Path) -> None:
    """The nightly's publish stage is not retried for it (a retry would publish another
    release and run the command again), and the run's record keeps the command's line."""
    from sqlmodel import select

    from pipeline.store.tables import PipelineRun, engine_for

    write_entry()
    ingested_store()
    ran = tmp_path / "ran"
    command = shlex.join(["sh", "-c", f"echo once >> {shlex.quote(str(ran))}; exit 1"])
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "run"], cwd=REPO, capture_output=True, text=True,
        timeout=300, env=os.environ | {"APIDIR_PROBE_ENABLED": "false", "APIDIR_STAGE_RETRIES": "2",
                                       "APIDIR_RETRY_DELAY": "0",
                                       "APIDIR_AFTER_PUBLISH": command})
    assert done.returncode == 2, done.stderr
    output = Path(settings_env["APIDIR_OUTPUT_DIR"])
    line = (f"the new release is live at {output}, but the command APIDIR_AFTER_PUBLISH names "
            f"({command}) failed: exit status 1")
    told = [said for said in done.stderr.splitlines() if said.startswith("apidir: ")]
    assert told[-1:] == [f"apidir: {line}"]
    assert "Traceback" not in done.stderr
    assert ran.read_text() == "once\n"
    assert (output / "api" / "apis.json").is_file()
    engine = engine_for(settings_env["APIDIR_DATABASE_URL"])
    try:
        with Session(engine) as session:
            run = session.exec(select(PipelineRun).where(PipelineRun.state == "failed")).one()
    finally:
        engine.dispose()
    assert run.message == line


def test_the_preview_answers_with_the_host_files_of_the_release_live_now(
        settings_env: dict[str, str], write_entry: WriteEntry, ingested_store,
        data_dir: Path, tmp_path: Path) -> None:
    """`apidir serve` read `_headers` and `_redirects` once, as it started: a rename published
    while it ran was a 404 at the former address until it was restarted. It reads them again
    once another release is live; one it cannot parse leaves it answering with the last."""
    session, output = published(settings_env, write_entry, ingested_store)
    former = f"/api/apis/{OLD}.json"
    with run_serve(output, tmp_path / "serve") as base_url:
        assert status_of(base_url, former)[0] == 200
        rename(session, data_dir, write_entry)
        assert apidir_publish().returncode == 0
        status, location = status_of(base_url, former)
        assert (status, urlsplit(location or "").path) == (301, f"/api/apis/{NEW}.json")

        broken = tmp_path / "broken"  # a release whose `_redirects` no host can read
        shutil.copytree(output, broken, symlinks=True)
        (broken / "_redirects").write_bytes(b"\xff\xfe not text\n")
        output.rename(tmp_path / "retired")
        broken.rename(output)
        status, location = status_of(base_url, former)
        assert (status, urlsplit(location or "").path) == (301, f"/api/apis/{NEW}.json")
        assert status_of(base_url, f"/api/apis/{NEW}.json")[0] == 200
