"""`apidir publish`: scores the stored history and publishes, keeping history and changes."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline.cli import app
from pipeline.release.hosting import (
    HEADERS_FILE,
    NOT_FOUND_JSON,
    REDIRECTS_FILE,
    parse_headers_file,
    parse_redirects_file,
)
from pipeline.release.swap import UnsafeOutputFolder, live_folder
from pipeline.store.history import plan_targets, record_probes
from pipeline.store.tables import start_run
from tests.conftest import REPO, WriteEntry
from tests.test_history import result


@pytest.fixture
def stored(settings_env: dict[str, str], write_entry: WriteEntry, ingested_store) -> Path:
    """One entry in the store, probed live once; the output folder to publish to."""
    write_entry()
    session = ingested_store()
    target = plan_targets(session)[0]
    record_probes(session, start_run(session, "nightly"),
                  [result(target.url, "live", 200, 90.0, endpoint=target.endpoint_id)])
    return Path(settings_env["APIDIR_OUTPUT_DIR"])


def test_publish_scores_the_stored_history(stored: Path) -> None:
    outcome = CliRunner().invoke(app, ["publish"])
    assert outcome.exit_code == 0, outcome.output
    published = json.loads((stored / "api" / "apis.json").read_text())
    entry, = published["apis"]
    assert entry["status"]["state"] == "live" and entry["status"]["httpStatus"] == 200
    assert entry["builderScore"]["label"].endswith("% builder-friendly")
    assert (f"published {published['meta']['version']}: 1 entries; pages of 1 entries, 0 spliced"
            in outcome.output)
    assert (stored / "index.html").is_file() and (stored / "apis" / f"{entry['id']}.html").is_file()
    releases = json.loads((stored / "api" / "releases.json").read_text())
    assert releases["releases"][0]["counts"]["byState"]["live"] == 1


@pytest.mark.parametrize(("state", "final_url"), [
    ("unreachable", "ftp://ftp.example.com/x"),
    ("live", "https://example.com/" + "x" * 30_000),
])
def test_server_texts_stored_by_an_older_prober_never_keep_an_entry_out(
    settings_env: dict[str, str], write_entry: WriteEntry, ingested_store, state: str,
    final_url: str,
) -> None:
    """A final URL the release's URL rule refuses (a refused redirect's `ftp:` Location, as an
    older prober stored it), or one past the bound of a status's (as long as a header, stored
    before the prober kept none such), is published as no final URL: the entry stays in the
    release."""
    write_entry()
    session = ingested_store()
    target = plan_targets(session)[0]
    probed = (result(target.url, "live", 200, 90.0, endpoint=target.endpoint_id)
              if state == "live" else
              result(target.url, "unreachable", None, None, endpoint=target.endpoint_id,
                     error_class="blocked"))
    record_probes(session, start_run(session, "nightly"),
                  [replace(probed, final_url=final_url, redirects=1)])
    outcome = CliRunner().invoke(app, ["publish"])
    assert outcome.exit_code == 0, outcome.output
    output = Path(settings_env["APIDIR_OUTPUT_DIR"])
    entry, = json.loads((output / "api" / "apis.json").read_text())["apis"]
    assert entry["status"]["state"] == state
    assert entry["status"]["finalUrl"] is None


def test_a_second_publish_says_how_many_pages_it_spliced(stored: Path) -> None:
    """The previous release's entry pages are reused for their static parts, and the line says
    so: an operator sees why a publish took the time it did."""
    assert CliRunner().invoke(app, ["publish"]).exit_code == 0
    again = CliRunner().invoke(app, ["publish"])
    assert again.exit_code == 0, again.output
    version = json.loads((stored / "api" / "apis.json").read_text())["meta"]["version"]
    assert f"published {version}: 1 entries; pages of 1 entries, 1 spliced" in again.output


def test_pages_can_be_left_out(stored: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APIDIR_PUBLISH_PAGES", "false")
    outcome = CliRunner().invoke(app, ["publish"])
    assert outcome.exit_code == 0 and "entries" in outcome.output and "pages" not in outcome.output
    assert (stored / "api" / "apis.json").is_file()
    assert not (stored / "index.html").exists() and not (stored / "apis").exists()
    # the host's files come with every release: its rules, and the JSON 404 body that
    # api/openapi.json declares and the nginx config sends, which the one 404 rule names
    assert parse_headers_file((stored / HEADERS_FILE).read_text())
    assert json.loads((stored / NOT_FOUND_JSON).read_text())["error"]["code"] == "not_found"
    assert parse_redirects_file((stored / REDIRECTS_FILE).read_text()) == [
        ("/api/*", "/" + NOT_FOUND_JSON, 404)]


def first_server(document: dict) -> str:
    """The address a tool calls: `servers[0].url` as it is, as many tools read it (without
    filling in server variables)."""
    return document["servers"][0]["url"]


def test_the_published_openapi_document_names_the_release_s_own_address(
    stored: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Swagger UI and client generators call the first server: the release's, not localhost."""
    monkeypatch.setenv("APIDIR_BASE_URL", "https://dir.example")
    outcome = CliRunner().invoke(app, ["publish"])
    assert outcome.exit_code == 0, outcome.output
    published = json.loads((stored / "api" / "openapi.json").read_text())
    assert first_server(published) == "https://dir.example"
    version = json.loads((stored / "api" / "apis.json").read_text())["meta"]["version"]
    kept = stored / "api" / "releases" / version.replace("+", "_") / "openapi.json"
    assert first_server(json.loads(kept.read_text())) == "https://dir.example"


def apidir_publish(**settings: str) -> subprocess.CompletedProcess[str]:
    """`apidir publish` in a process of its own, as a user runs it (its one-line errors)."""
    return subprocess.run([sys.executable, "-m", "pipeline.cli", "publish"], cwd=REPO,
                          env=os.environ | {"APIDIR_BASE_URL": "https://apis.example.org",
                                            **settings},
                          capture_output=True, text=True, timeout=300)


def test_a_folder_holding_files_but_no_release_is_never_replaced(stored: Path) -> None:
    """An output folder that holds other files (a mistyped APIDIR_OUTPUT_DIR) is refused in
    one line before anything moves: the swap would have moved them aside, and the next
    publish deleted them."""
    stored.mkdir(parents=True)
    (stored / "thesis.txt").write_text("years of work\n")
    done = apidir_publish()
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"apidir: output folder {stored} holds files but no release (no api/categories.json); "
        "refusing to replace it: set APIDIR_OUTPUT_DIR to a new or empty folder")
    assert sorted(path.name for path in stored.parent.iterdir()
                  if path.name.startswith(f".{stored.name}.") and "lock" not in path.name) == []
    assert [path.name for path in stored.iterdir()] == ["thesis.txt"]


def test_a_symlinked_output_folder_stays_a_link_to_the_live_release(
    stored: Path, tmp_path: Path
) -> None:
    """The swap happens where the folder really is: the link keeps leading to the live
    release, publish after publish, and the folder it leads to is the release."""
    real = tmp_path / "site"
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.symlink_to(real, target_is_directory=True)
    versions = []
    for _ in range(3):
        done = apidir_publish()
        assert done.returncode == 0, done.stderr
        assert stored.is_symlink() and stored.resolve() == real
        versions.append(json.loads((real / "api" / "apis.json").read_text())["meta"]["version"])
    assert len(set(versions)) == 3
    assert not [path for path in stored.parent.iterdir() if path.name.startswith(".public.")
                and "lock" not in path.name]


def test_an_empty_store_leaves_the_live_release_as_it_is(stored: Path, tmp_path: Path) -> None:
    """A store holding no entry (a mistyped APIDIR_DATABASE_URL makes a new one) publishes
    nothing: its release would have replaced the live one with an empty one."""
    assert apidir_publish().returncode == 0
    live = (stored / "api" / "apis.json").read_bytes()
    done = apidir_publish(APIDIR_DATABASE_URL=f"sqlite:///{tmp_path / 'typo.db'}")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1].startswith(
        f"apidir: the store sqlite:///{tmp_path / 'typo.db'} holds no entries: nothing to "
        "publish, and the live release is left as it is")
    assert (stored / "api" / "apis.json").read_bytes() == live


def test_the_file_system_s_root_is_no_output_folder() -> None:
    with pytest.raises(UnsafeOutputFolder, match="is the file system's root"):
        live_folder(Path("/"))


def test_an_empty_output_folder_setting_is_refused(stored: Path) -> None:
    """`APIDIR_OUTPUT_DIR=` would mean the working folder: refused in one line naming it."""
    done = apidir_publish(APIDIR_OUTPUT_DIR="")
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "apidir: invalid setting: APIDIR_OUTPUT_DIR: Value error, empty: name the folder the "
        "release is published to")


HOLD_THE_WRITE_LOCK = """\
import sqlite3, sys
store = sqlite3.connect(sys.argv[1], isolation_level=None)
store.execute("BEGIN IMMEDIATE")
print("held", flush=True)
sys.stdin.readline()
store.execute("COMMIT")
"""


@pytest.mark.backends("sqlite")
def test_a_store_that_cannot_record_the_release_leaves_the_live_one(
    stored: Path, settings_env: dict[str, str]
) -> None:
    """Another process holds the store's write lock: the release's record is written before
    its swap, so the publish fails in one line with the previous release still live, rather
    than leaving a live release the store never recorded (and a retry publishing another)."""
    url = settings_env["APIDIR_DATABASE_URL"]
    assert apidir_publish().returncode == 0
    live = {path: (stored / "api" / path).read_bytes() for path in ("apis.json", "releases.json")}
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THE_WRITE_LOCK,
                               url.removeprefix("sqlite:///")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        done = apidir_publish(APIDIR_DATABASE_URL=f"{url}?timeout=0.5")
    finally:
        holder.communicate("\n", timeout=60)
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines()[-1] == (f"apidir: publish failed on the store {url}"
                                            "?timeout=0.5: database is locked"), done.stderr
    assert {path: (stored / "api" / path).read_bytes() for path in live} == live


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A file system of its own, 4 MB of memory (tmpfs), for a publish to run out of space
    on; skipped where this process may not mount one."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def fill(disk: Path) -> None:
    """Take the space left on `disk`, to the last block."""
    filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(filler, bytes(65536))
    except OSError as full:
        assert full.errno == errno.ENOSPC
    finally:
        os.close(filler)


@pytest.mark.parametrize("command", [["publish"], ["run"]])
def test_a_full_disk_is_one_line_naming_where_and_the_live_release_stays(
    stored: Path, small_disk: Path, command: list[str]
) -> None:
    """A publish (alone or a run's) that runs out of space says where, and that the live
    release is unchanged, in one line: the error's own words ("[Errno 28] No space left on
    device") named neither."""
    output = small_disk / "public"
    assert apidir_publish(APIDIR_OUTPUT_DIR=str(output)).returncode == 0
    live = {path: path.read_bytes() for path in output.rglob("*") if path.is_file()}
    fill(small_disk)
    done = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *command], cwd=REPO, capture_output=True,
        text=True, timeout=300,
        env=os.environ | {"APIDIR_OUTPUT_DIR": str(output), "APIDIR_PROBE_ENABLED": "false",
                          "APIDIR_STAGE_RETRIES": "0"})
    assert done.returncode == 2, done.stderr
    told = [line for line in done.stderr.splitlines() if line.startswith("apidir: ")]
    assert told[-1] == (f"apidir: publishing to {output} failed: No space left on device in "
                        f"{small_disk}/, where the new release is staged; the live release is "
                        "unchanged")
    assert {path: path.read_bytes() for path in output.rglob("*") if path.is_file()} == live


async def test_a_run_s_full_disk_is_the_command_s_line_in_its_record_and_alert(
    stored: Path, small_disk: Path, settings_env: dict[str, str]
) -> None:
    """A run whose publish runs out of space keeps in its record, and sends in its alert, the
    line the command ends with, not the system's words that name no path."""
    from sqlmodel import Session, select

    from pipeline.store.tables import PipelineRun, engine_for
    from tests.webhook import WebhookReceiver

    output = small_disk / "public"
    assert apidir_publish(APIDIR_OUTPUT_DIR=str(output)).returncode == 0
    fill(small_disk)
    receiver = await WebhookReceiver().start()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pipeline.cli", "run", cwd=REPO,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=os.environ | {"APIDIR_OUTPUT_DIR": str(output), "APIDIR_PROBE_ENABLED": "false",
                              "APIDIR_STAGE_RETRIES": "0",
                              "APIDIR_ALERT_WEBHOOK_URL": receiver.url})
        _, stderr = await asyncio.wait_for(process.communicate(), timeout=300)
    finally:
        await receiver.close()
    assert process.returncode == 2, stderr.decode()
    told = [line for line in stderr.decode().splitlines() if line.startswith("apidir: ")][-1]
    assert told == (f"apidir: publishing to {output} failed: No space left on device in "
                    f"{small_disk}/, where the new release is staged; the live release is "
                    "unchanged")
    with Session(engine_for(settings_env["APIDIR_DATABASE_URL"])) as session:
        run = session.exec(select(PipelineRun).where(PipelineRun.state == "failed")).one()
    assert run.message == told.removeprefix("apidir: ")
    assert receiver.events() == ["run_failed"]
    assert receiver.received[0]["run"]["message"] == run.message


def test_a_publish_error_naming_its_file_names_it_and_what_went_live(tmp_path: Path) -> None:
    """An error that names its file (most but a failed write) is told with that file; one
    after the new release went live says so rather than that the live release is unchanged."""
    from pipeline.release.swap import publish_failure_line

    error = OSError(errno.EACCES, "Permission denied", str(tmp_path / "public" / "api"))
    assert publish_failure_line(error, tmp_path / "public", unchanged=False) == (
        f"publishing to {tmp_path / 'public'} failed: Permission denied: "
        f"{tmp_path / 'public' / 'api'}; the new release went live before the error")


def test_every_stored_entry_refused_keeps_the_live_release_in_one_line(
    stored: Path, settings_env: dict[str, str]
) -> None:
    """The one stored entry holds a base address the release's check refuses (stored before
    the rule): leaving it out would publish an empty release over the live one, so nothing is
    published, in one line naming the entry, its file and the field."""
    from pipeline.settings import Settings
    from tests.test_publish import store_refused_value

    assert apidir_publish().returncode == 0
    live = {path: path.read_bytes() for path in stored.rglob("*") if path.is_file()}
    settings = Settings()
    store_refused_value(settings, "example-weather", baseUrl="https://api.example.com/%zz")
    done = apidir_publish()
    assert done.returncode == 2, done.stderr
    file = settings.entries_dir / "weather" / "example-weather.yaml"
    assert done.stderr.splitlines() == [
        "apidir: the one stored entry breaks the release's contract: nothing was published and "
        f"the live release is unchanged; first: entry example-weather ({file}): field baseUrl: "
        "holds a '%' not followed by two hex digits: write a '%' itself as %25; left out of "
        "the release"], done.stderr
    assert {path: path.read_bytes() for path in stored.rglob("*") if path.is_file()} == live


def test_an_entry_left_out_is_a_warning_line_and_the_others_publish(
    stored: Path, settings_env: dict[str, str], write_entry: WriteEntry, ingested_store
) -> None:
    """One of two stored entries holds a host the release's check refuses: the other is
    published, and the command warns in one line naming the entry, its file and the field."""
    from pipeline.settings import Settings
    from tests.conftest import make_entry
    from tests.test_publish import store_refused_value

    write_entry(make_entry(id="other-weather"))
    ingested_store()
    settings = Settings()
    store_refused_value(settings, "example-weather", baseUrl="https://caf\u00e9.example/v1")
    done = apidir_publish()
    assert done.returncode == 0, done.stderr
    file = settings.entries_dir / "weather" / "example-weather.yaml"
    assert (f"apidir: warning: entry example-weather ({file}): field baseUrl: has a host that "
            "is not ASCII: write it in its IDNA form (xn--…); left out of the release"
            in done.stderr.splitlines())
    assert "1 entries (1 left out: the release's check refused them)" in done.stdout
    published = json.loads((stored / "api" / "apis.json").read_text())
    assert [api["id"] for api in published["apis"]] == ["other-weather"]
