"""The `apidir` command behaves: every error a user can cause ends in one clear line on
standard error (never a traceback), with an exit status that says what happened."""

from __future__ import annotations

import os
import select
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from tests.conftest import REPO, WriteEntry
from tests.postgres_server import free_port


def apidir(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO, timeout: float = 120
           ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pipeline.cli", *args], cwd=cwd,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout)


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


def test_version() -> None:
    done = apidir("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("apidir 2.") and "interface 2.0.0" in done.stdout


def test_help_names_plain_types() -> None:
    done = apidir("backfill", "--help")
    assert done.returncode == 0
    assert "START" in done.stdout and "CATEGORY" in done.stdout and "ID" in done.stdout
    for raw in ("%Y-%m-%d", "list[str]", "<bool>"):
        assert raw not in done.stdout


def test_a_misspelt_backfill_category_is_one_line_with_a_suggestion() -> None:
    done = apidir("backfill", "2026-11-01", "2026-11-02", "--category", "wether")
    assert done.returncode == 2
    line = one_line(done)
    assert "no category 'wether'" in line and "did you mean 'weather'?" in line


def test_a_backfill_that_ends_before_it_starts_is_refused() -> None:
    done = apidir("backfill", "2026-11-05", "2026-11-01")
    assert done.returncode == 2
    assert "END 2026-11-01 is before START 2026-11-05" in one_line(done)


def test_serve_on_a_busy_port_is_one_line_and_never_claims_to_serve(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<!doctype html>")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = apidir("serve", "--dir", str(tmp_path), "--port", str(port))
    assert done.returncode == 2
    assert "serving" not in done.stdout
    assert f"cannot serve on 127.0.0.1:{port}" in one_line(done)


def serve_refused(folder: Path) -> subprocess.CompletedProcess[str]:
    """`apidir serve` on `folder`, which must refuse it before serving (the old code served
    on, so a short timeout ends the test)."""
    port = str(free_port())
    command = [sys.executable, "-m", "pipeline.cli", "serve", "--dir", str(folder),
               "--port", port]
    if os.geteuid() == 0:  # root reads a file of mode 000 unless it loses the capability
        command = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(("name", "content", "problem"), [
    ("_headers", b"/*\n  X-Bad: a\x00b\n", "line 2: a control character in the value"),
    ("_headers", b"/*\n  X-Bad: a\x1cb\n", "line 2: a control character in the value"),
    ("_headers", b"/*\n  Bad Name: v\n", "line 2: 'Bad Name' is not a header name"),
    ("_headers", b"# rules\n/*\n  : empty\n", "line 3: '' is not a header name"),
    ("_headers", b"  X-Early: v\n", "line 1: expected 'Name: value' under a path"),
    ("_headers", b"/*\n  X-Latin: caf\xe9\n", "not UTF-8 text"),
    ("_redirects", b"/api/*  /api/404.json\n", "line 1: expected 'source target status'"),
    ("_redirects", b"/api/*  /api/404.json  \xb2\n", "not UTF-8 text"),
    ("_redirects", b"/api/*  /api/404.json  \xc2\xb2\n",
     "line 1: expected 'source target status'"),
])
def test_serve_names_a_broken_host_file_in_one_line(tmp_path: Path, name: str, content: bytes,
                                                    problem: str) -> None:
    (tmp_path / "index.html").write_text("<!doctype html>")
    (tmp_path / name).write_bytes(content)
    done = serve_refused(tmp_path)
    assert done.returncode == 2, done.stderr
    assert "serving" not in done.stdout
    assert one_line(done).startswith(f"apidir: {tmp_path / name}: {problem}")


def test_serve_names_an_unreadable_host_file_not_the_address(tmp_path: Path) -> None:
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("root reads any file; setpriv, which would drop that, is missing")
    (tmp_path / "index.html").write_text("<!doctype html>")
    headers = tmp_path / "_headers"
    headers.write_text("/*\n  X-Frame-Options: DENY\n")
    headers.chmod(0)
    done = serve_refused(tmp_path)
    assert done.returncode == 2, done.stderr
    assert one_line(done) == f"apidir: {headers}: cannot read: Permission denied"


def test_serve_prints_an_ipv6_address_in_brackets(tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            port = probe.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback here")
    (tmp_path / "index.html").write_text("<!doctype html>")
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--dir", str(tmp_path),
         "--host", "::1", "--port", str(port)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        line = process.stdout.readline() if ready else ""
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert f"at http://[::1]:{port}/ " in line, line


def test_a_malformed_url_is_reported_as_malformed_and_fails_the_probe() -> None:
    done = apidir("probe", "not a url", "--json")
    assert done.returncode == 1
    assert '"error_class": "malformed"' in done.stdout
    assert "1 of 1 probe(s) got no HTTP response" in one_line(done)


def test_validate_outside_a_checkout_says_where_it_looked(tmp_path: Path) -> None:
    done = apidir("validate", cwd=tmp_path, env={"PYTHONPATH": str(REPO)})
    assert done.returncode == 2
    line = one_line(done)
    assert "no entries folder at data/entries" in line and "APIDIR_DATA_DIR" in line


def test_validate_names_a_path_that_does_not_exist(settings_env: dict[str, str]) -> None:
    done = apidir("validate", "no/such/file.yaml", env=settings_env)
    assert done.returncode == 2
    assert one_line(done) == "apidir: no such file or folder: no/such/file.yaml"


def test_a_bad_setting_is_one_line_naming_the_variable(settings_env: dict[str, str]) -> None:
    done = apidir("publish", env=settings_env | {"APIDIR_PROBE_TIMEOUT": "-1"})
    assert done.returncode == 2
    assert one_line(done).startswith("apidir: invalid setting: APIDIR_PROBE_TIMEOUT:")


def test_too_few_days_of_probes_kept_for_the_scores_is_one_line(
        settings_env: dict[str, str]) -> None:
    done = apidir("publish", env=settings_env | {"APIDIR_PROBES_KEPT_DAYS": "7"})
    assert done.returncode == 2
    assert one_line(done).startswith("apidir: invalid setting: APIDIR_PROBES_KEPT_DAYS: ")
    assert "0 (every probe kept) or at least 31" in one_line(done)


def test_publishing_over_a_file_is_refused_in_one_line_and_the_file_kept(
    write_entry: WriteEntry, settings_env: dict[str, str], tmp_path: Path, ingested_store
) -> None:
    write_entry()
    ingested_store()  # a store holding no entry publishes nothing
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    done = apidir("publish", env=settings_env | {"APIDIR_OUTPUT_DIR": str(notes)})
    assert done.returncode == 2
    assert one_line(done) == (f"apidir: output folder {notes} is a file, not a folder; "
                              "refusing to publish over it")
    assert notes.read_text() == "mine\n"
    assert not [path for path in tmp_path.iterdir() if "staging" in path.name
                or "retired" in path.name]


def test_publishing_for_localhost_warns(
    write_entry: WriteEntry, settings_env: dict[str, str], ingested_store
) -> None:
    write_entry()
    ingested_store()  # a store holding no entry publishes nothing
    env = {key: value for key, value in settings_env.items() if key != "APIDIR_BASE_URL"}
    local = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "publish"], cwd=REPO, capture_output=True,
        text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "APIDIR_BASE_URL"} | env)
    assert local.returncode == 0, local.stderr
    assert "warning: meta.source and sitemap.xml point at the local default " \
           "http://localhost:8000;" in local.stderr
    served = apidir("publish", env=settings_env)
    assert served.returncode == 0 and "warning" not in served.stderr


def test_a_failed_run_ends_in_one_line_without_tracebacks(
    settings_env: dict[str, str], data_dir: Path
) -> None:
    """`apidir run` with the entries folder gone: Prefect's own log lines stay, its
    tracebacks do not reach the terminal, and the last line says what failed."""
    (data_dir / "entries").rmdir()
    done = apidir("run", env=settings_env | {"APIDIR_PROBE_ENABLED": "false",
                                              "APIDIR_STAGE_RETRIES": "0"})
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and '  File "' not in done.stderr
    last = [line for line in done.stderr.splitlines() if line.startswith("apidir: ")][-1]
    assert last.startswith("apidir: ingest stage failed: EmptyCatalogError: no entries folder")


def test_a_failed_run_whose_alert_was_not_delivered_says_so_in_its_last_line(
    settings_env: dict[str, str], data_dir: Path
) -> None:
    """The webhook told nobody of the failure, so the command does; a webhook that never
    answers is told by the seconds waited and the setting bounding them."""
    (data_dir / "entries").rmdir()
    with socket.socket() as silent:  # accepts connections and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        done = apidir("run", env=settings_env | {
            "APIDIR_PROBE_ENABLED": "false", "APIDIR_STAGE_RETRIES": "0",
            "APIDIR_ALERT_TIMEOUT": "0.5",
            "APIDIR_ALERT_WEBHOOK_URL": f"http://127.0.0.1:{silent.getsockname()[1]}/hook"})
    assert done.returncode == 2
    last = [line for line in done.stderr.splitlines() if line.startswith("apidir: ")][-1]
    assert last.startswith("apidir: ingest stage failed: EmptyCatalogError: no entries folder")
    assert last.endswith("; the alert was not delivered: no answer within 0.5 s "
                         "(APIDIR_ALERT_TIMEOUT bounds each attempt)")


def test_a_temporary_server_that_does_not_start_in_time_is_told_in_one_line(
    settings_env: dict[str, str], write_entry: WriteEntry
) -> None:
    """Prefect's temporary server not answering within its wait ends `apidir run` in one line
    that names the setting to raise; the wait's own default is long enough for a cold start
    on busy cores (Prefect's 20 s is not)."""
    write_entry()
    done = apidir("run", env=settings_env | {
        "APIDIR_PROBE_ENABLED": "false", "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "0"})
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and '  File "' not in done.stderr
    last = [line for line in done.stderr.splitlines() if line.startswith("apidir: ")][-1]
    log = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect")) / "temporary-server.log"
    assert last == ("apidir: Prefect's temporary server did not start within 0 s (its output: "
                    f"{log}); set PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS higher, or "
                    "PREFECT_API_URL to a running Prefect server")


def test_the_command_waits_longer_for_the_temporary_server_unless_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`apidir` sets the product's wait for Prefect's temporary server, and turns its
    telemetry off, before any command runs, and keeps the operator's own settings."""
    import pipeline.cli as cli
    from pipeline.operations.local_mode import STARTUP_WAIT, STARTUP_WAIT_SECONDS, TELEMETRY

    seen = []
    monkeypatch.setattr(cli, "app", lambda: seen.append(
        (os.environ.get(STARTUP_WAIT), os.environ.get(TELEMETRY))))
    for given, expected in (((None, None), (STARTUP_WAIT_SECONDS, "false")),
                            (("7", "true"), ("7", "true"))):
        for name, value in zip((STARTUP_WAIT, TELEMETRY), given, strict=True):
            monkeypatch.setenv(name, value or "")  # restored as it was after the test
            if value is None:
                monkeypatch.delenv(name)
        cli.main()
        assert seen.pop() == expected
    assert int(STARTUP_WAIT_SECONDS) > 20  # Prefect's own wait, too short for a cold start


def test_a_run_with_many_invalid_files_names_the_first_and_counts_the_rest() -> None:
    """`apidir run` tells of the invalid files from the run's ingest brief, which names at most
    the first 200 of them."""
    from pipeline.catalogue.ingest import IngestSummary
    from pipeline.cli import invalid_files_line
    from pipeline.operations.report import LISTED, IngestBrief

    invalid = [f"api-{n:05d}" for n in range(LISTED + 50)]
    brief = asdict(IngestBrief.of(IngestSummary(invalid=invalid)))
    line = invalid_files_line(brief)
    assert line.startswith("250 invalid entry file(s) kept their last valid version: api-00000, ")
    assert line.endswith(f"api-{LISTED - 1:05d} and 50 more (see `apidir validate`)")
    assert invalid_files_line(asdict(IngestBrief.of(IngestSummary()))) is None


def break_categories(data_dir: Path, how: str) -> Path:
    """Make the data folder's categories file hostile or wrong in one way; its path."""
    path = data_dir / "categories.yaml"
    if how == "outside":
        outside = data_dir.parent / "categories.yaml"
        outside.write_text(path.read_text().replace("label: ", "label: leaked "))
        path.unlink()
        path.symlink_to(outside)
    elif how == "dev-zero":
        path.unlink()
        path.symlink_to("/dev/zero")
    elif how == "latin-1":
        path.write_bytes(path.read_bytes().replace(b"label: Weather", b"label: Caf\xe9"))
    else:  # a category without its label
        path.write_text(path.read_text().replace("  label: Weather\n", ""))
    return path


CATEGORY_FAULTS = ["outside", "dev-zero", "latin-1", "missing-field"]
CATEGORY_LINES = {"outside": "[outside-data]", "dev-zero": "[outside-data]",
                  "latin-1": "[not-utf8]",
                  "missing-field": "category weather: field label: Field required"}


@pytest.mark.parametrize("how", CATEGORY_FAULTS)
def test_validate_tells_a_bad_categories_file_in_one_line(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str], how: str
) -> None:
    write_entry()
    path = break_categories(data_dir, how)
    done = apidir("validate", env=settings_env)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "leaked" not in done.stderr
    problem, count = done.stderr.strip().splitlines()
    assert problem.startswith(f"{path}:") and CATEGORY_LINES[how] in problem
    assert count == "1 problem(s) in 1 file(s)"


@pytest.mark.parametrize("how", ["outside", "latin-1"])
def test_publish_tells_a_bad_categories_file_in_one_line(
    write_entry: WriteEntry, data_dir: Path, settings_env: dict[str, str], tmp_path: Path,
    how: str
) -> None:
    write_entry()
    path = break_categories(data_dir, how)
    done = apidir("publish", env=settings_env)
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith(f"apidir: {path}:") and line.endswith(CATEGORY_LINES[how])
    assert not (tmp_path / "public").exists()


def test_validate_names_a_link_to_nothing(
    write_entry: WriteEntry, settings_env: dict[str, str]
) -> None:
    fine = write_entry()
    (fine.parent / "x.yaml").symlink_to("/nonexistent/x.yaml")
    done = apidir("validate", env=settings_env)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{fine.parent}/x.yaml: entry x: field -: links to nothing (to /nonexistent/x.yaml) "
        "[unreadable]", "1 problem(s) in 2 file(s)"]


def test_validate_names_a_file_whose_name_is_not_utf8(
    write_entry: WriteEntry, settings_env: dict[str, str]
) -> None:
    fine = write_entry()
    with open(os.fsencode(fine.parent) + b"/bad\xffname.yaml", "wb") as file:
        file.write(fine.read_bytes())
    done = apidir("validate", env=settings_env)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"{fine.parent}/bad\\xffname.yaml: entry bad\\xffname: field -: the file name is not "
        "UTF-8: rename the file to its entry's id [bad-file-name]",
        "1 problem(s) in 2 file(s)"]


def test_serve_answers_a_request_it_cannot_parse_without_a_traceback(tmp_path: Path) -> None:
    """A request target past aiohttp's 8 KiB limit is answered 400 and logged in one line;
    its traceback was printed on the terminal of `apidir serve`."""
    (tmp_path / "index.html").write_text("<!doctype html>")
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "serve", "--dir", str(tmp_path),
         "--port", str(port)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([process.stdout], [], [], 30)
        assert ready and "serving" in process.stdout.readline()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as client:
            client.sendall(b"GET /" + b"a" * 10_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert client.recv(100).split(b" ")[1] == b"400"
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=10)
    assert "Traceback" not in stderr, stderr
    assert stderr.splitlines() == ["Error handling request from 127.0.0.1"], stderr
