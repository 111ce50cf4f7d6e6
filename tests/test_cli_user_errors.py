"""Errors a user can cause with the store, the settings, the dates or the terminal end in one
line naming what is wrong and where (exit status 2), never an unexpected error."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, WriteEntry, hold_the_write_lock, ingested_session
from tests.postgres_server import free_port, scratch_database
from tests.test_cli_errors import apidir, one_line
from tests.webhook import WebhookReceiver


def sqlite_env(tmp_path: Path, data_dir: Path) -> dict[str, str]:
    """APIDIR_* variables for a scratch SQLite store (var/apidir.db), data and output folder."""
    return {"APIDIR_DATA_DIR": str(data_dir), "APIDIR_OUTPUT_DIR": str(tmp_path / "public"),
            "APIDIR_BASE_URL": "https://directory.test",
            "APIDIR_DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'apidir.db'}"}


def store_of_a_newer_version(settings_env: dict[str, str], tmp_path: Path) -> str:
    """A SQLite store a newer version wrote (schema revision 0099); its URL."""
    assert apidir("db", "upgrade", env=settings_env).returncode == 0
    database = tmp_path / "var" / "apidir.db"
    with sqlite3.connect(database) as connection:
        connection.execute("UPDATE alembic_version SET version_num = '0099'")
    connection.close()
    return settings_env["APIDIR_DATABASE_URL"]


@pytest.mark.parametrize(("command", "extra"), [
    (["db", "current"], {}), (["db", "upgrade"], {}), (["db", "downgrade", "0001"], {}),
    (["db", "compact"], {}),
    (["publish"], {}), (["publish"], {"APIDIR_DATABASE_UPGRADE": "check"})])
def test_a_store_of_a_newer_version_says_so_in_one_line(
    tmp_path: Path, data_dir: Path, command: list[str], extra: dict[str, str]
) -> None:
    from pipeline.store.migrate import head_revision

    env = sqlite_env(tmp_path, data_dir)
    url = store_of_a_newer_version(env, tmp_path)
    done = apidir(*command, env=env | extra)
    assert done.returncode == 2
    line = one_line(done)
    assert line == (
        f"apidir: the store {url} has schema revision 0099, which this version does not know "
        f"(it knows 0001 to {head_revision()}): a newer version wrote it; install that "
        f"version, or take the store back to {head_revision()} with that version's "
        f"`apidir db downgrade {head_revision()}`")
    assert "db upgrade" not in line
    database = tmp_path / "var" / "apidir.db"
    with sqlite3.connect(database) as connection:  # left as that version wrote it
        assert connection.execute("SELECT version_num FROM alembic_version").fetchall() == [
            ("0099",)]
    connection.close()


@pytest.mark.parametrize(("url", "said"), [
    ("sqlite:///{tmp}/x.db?timeout=abc", "an option of the URL is wrong (could not convert"),
    ("postgresql://u:secret@127.0.0.1:notaport/db", "its port is not a number"),
    ("mysql://u:secret@127.0.0.1/db", "not mysql;"),
    ("postgresql+psycopg2://u:secret@127.0.0.1/db", "not postgresql+psycopg2;"),
    ("sqlite+aiosqlite:///{tmp}/x.db", "not sqlite+aiosqlite;"),
    ("postgresql+asyncpg://u:secret@127.0.0.1/db", "not postgresql+asyncpg;"),
    ("postgresql+psycopg://u:secret@127.0.0.1:99999/db",
     "postgresql+psycopg://u:***@127.0.0.1:99999/db: its port 99999 is not between 1 and 65535"),
    ("sqlite:///{tmp}/x.db?mode=ro", "x.db?mode=ro: SQLite URI options are not supported (mode): "
     "the store is one file its commands write, never opened read-only"),
    ("sqlite:///{tmp}/x.db?mode=ro&uri=true", "SQLite URI options are not supported (mode, uri)"),
    ("sqlite:///file:{tmp}/x.db", "a SQLite URI (file:…) is not supported: SQLite reads it as a "
     "file of that name under the working folder or as the file it names"),
    ("sqlite:///file:{tmp}/x.db?timeout=5", "a SQLite URI (file:…) is not supported"),
])
def test_a_database_url_the_store_cannot_use_is_one_setting_line(
    tmp_path: Path, data_dir: Path, url: str, said: str
) -> None:
    done = apidir("db", "current", env=sqlite_env(tmp_path, data_dir) | {
        "APIDIR_DATABASE_URL": url.format(tmp=tmp_path)})
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith("apidir: invalid setting: APIDIR_DATABASE_URL: ") and said in line
    assert "secret" not in done.stderr
    assert not list(tmp_path.glob("x.db*"))  # nor a store written past the option
    assert not (REPO / "file:").exists()  # nor one under the working folder, named as the URI
    if said.startswith("not "):
        assert line.endswith("; use sqlite:///FILE or "
                             "postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE")


@pytest.mark.parametrize("command", [["db", "current"], ["db", "compact"], ["db", "upgrade"],
                                     ["publish"]])
@pytest.mark.parametrize("damage", ["not-sqlite", "malformed"])
def test_a_store_file_that_is_not_sqlite_or_is_damaged_is_one_line(
    tmp_path: Path, data_dir: Path, command: list[str], damage: str
) -> None:
    database = tmp_path / "var" / "apidir.db"
    env = sqlite_env(tmp_path, data_dir)
    if damage == "not-sqlite":
        database.parent.mkdir()
        database.write_text("these are my notes, not a database\n" * 200)
    else:
        assert apidir("db", "upgrade", env=env).returncode == 0
        with sqlite3.connect(database) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            connection.execute("PRAGMA journal_mode=DELETE")
        connection.close()
        damaged = bytearray(database.read_bytes())
        damaged[8192::7] = b"\x55" * len(damaged[8192::7])  # every page but the first two
        database.write_bytes(damaged)
    done = apidir(*command, env=env)
    assert done.returncode == 2
    said = "file is not a database" if damage == "not-sqlite" else "disk image is malformed"
    assert one_line(done) == (
        f"apidir: {database} (APIDIR_DATABASE_URL) is not a SQLite database, or is damaged "
        f"(database {said}): restore it from a backup, or set APIDIR_DATABASE_URL to another "
        "file".replace("database file is", "file is"))


@pytest.mark.parametrize("command", [["db", "current"], ["db", "upgrade"], ["publish"]])
def test_a_store_folder_that_cannot_be_made_is_one_line_naming_the_setting(
    tmp_path: Path, data_dir: Path, command: list[str]
) -> None:
    """A SQLite store whose folder cannot be made (a file on its path) is told as the
    setting's matter, naming the folder and the file in the way: the system's bare `[Errno
    17] File exists` named neither the setting nor the cause."""
    in_the_way = tmp_path / "notes.txt"
    in_the_way.write_text("a file, not a folder\n")
    env = sqlite_env(tmp_path, data_dir) | {
        "APIDIR_DATABASE_URL": f"sqlite:///{in_the_way / 'var' / 'apidir.db'}"}
    done = apidir(*command, env=env)
    assert done.returncode == 2
    assert one_line(done) == (
        f"apidir: the store's folder {in_the_way / 'var'} (APIDIR_DATABASE_URL) cannot be made: "
        f"{in_the_way} is a file, not a folder; set APIDIR_DATABASE_URL to a file in a folder "
        "that can be")
    assert in_the_way.read_text() == "a file, not a folder\n"


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The command's own last line (a run's Prefect log lines come before it)."""
    assert "Traceback" not in done.stderr, done.stderr
    return [line for line in done.stderr.splitlines() if line.startswith("apidir: ")][-1]


def assert_no_statement(line: str) -> None:
    """SQLAlchemy's text of a database error (the statement, its parameters, its docs' link)
    is not the user's line."""
    for said in ("[SQL:", "[parameters:", "sqlalche.me", "OperationalError"):
        assert said not in line, line


@pytest.mark.parametrize("command", [["publish"], ["run"], ["db", "compact"]])
def test_a_store_another_process_holds_locked_is_one_line(
    tmp_path: Path, data_dir: Path, write_entry: WriteEntry, command: list[str]
) -> None:
    """Another writer holding a SQLite store's write lock past the busy timeout: the command
    names itself, the store and SQLite's reason, without the statement it ran."""
    env = sqlite_env(tmp_path, data_dir)
    write_entry()
    with ingested_session(env["APIDIR_DATABASE_URL"], data_dir / "entries"):
        pass
    url = f"{env['APIDIR_DATABASE_URL']}?timeout=0.2"
    taken, done_with = threading.Event(), threading.Event()
    holder = threading.Thread(target=hold_the_write_lock, args=(tmp_path / "var" / "apidir.db", 0),
                              kwargs={"taken": taken, "end": done_with.is_set})
    holder.start()
    try:
        assert taken.wait(60)
        done = apidir(*command, env=env | {"APIDIR_DATABASE_URL": url,
                                           "APIDIR_PROBE_ENABLED": "false"})
    finally:
        done_with.set()
        holder.join()
    assert done.returncode == 2, done.stderr
    line = last_line(done)
    assert line == f"apidir: {' '.join(command)} failed on the store {url}: database is locked"
    assert_no_statement(line)


@pytest.mark.parametrize("command", [["publish"], ["db", "current"], ["db", "upgrade"]])
def test_a_postgres_store_nobody_answers_for_is_one_line_without_its_password(
    tmp_path: Path, data_dir: Path, command: list[str]
) -> None:
    """A PostgreSQL store whose server is down (a port nothing listens on): the command, the
    store with its password hidden, and the refused connection, in one line."""
    port = free_port()
    url = f"postgresql+psycopg://apidir:secret@127.0.0.1:{port}/apidir"
    done = apidir(*command, env=sqlite_env(tmp_path, data_dir) | {"APIDIR_DATABASE_URL": url})
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert line.startswith(f"apidir: {' '.join(command)} failed on the store "
                           f"postgresql+psycopg://apidir:***@127.0.0.1:{port}/apidir: "), line
    assert line.endswith("Connection refused"), line
    assert "secret" not in done.stderr
    assert_no_statement(line)


def test_a_postgres_server_refusing_the_store_s_user_is_one_line(
    tmp_path: Path, data_dir: Path, postgres_server: str
) -> None:
    """The server answers but refuses the connection (a user it does not know): its reason
    is the line's, after the command and the store."""
    from sqlalchemy.engine import make_url

    url = make_url(postgres_server).set(username="nobody_here", password="secret")
    done = apidir("publish", env=sqlite_env(tmp_path, data_dir) | {
        "APIDIR_DATABASE_URL": url.render_as_string(hide_password=False)})
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert line.startswith(
        f"apidir: publish failed on the store {url.render_as_string(hide_password=True)}: ")
    assert line.endswith('role "nobody_here" does not exist'), line
    assert "secret" not in done.stderr
    assert_no_statement(line)


# How an operator sets a PostgreSQL store up so that the pipeline cannot use it, with what the
# server says then: each is PostgreSQL's own class of error, none an OperationalError.
STORES_SET_UP_WRONG = {
    "user-without-rights": ([
        "CREATE ROLE {role} LOGIN PASSWORD 'secret'",
        "GRANT SELECT ON ALL TABLES IN SCHEMA public TO {role}"],
        "permission denied for table "),
    "read-only-database": (['ALTER DATABASE "{database}" SET default_transaction_read_only = on'],
                           "in a read-only transaction"),
    "table-taken-away": (["DROP TABLE entry_event"], 'relation "entry_event" does not exist'),
}


@pytest.mark.parametrize("setup", STORES_SET_UP_WRONG)
def test_a_postgres_store_set_up_so_the_pipeline_cannot_use_it_is_one_line(
    tmp_path: Path, data_dir: Path, write_entry: WriteEntry, postgres_server: str, setup: str
) -> None:
    """A store the operator set up wrong (a user without the rights on its tables, a database
    taking no writes, a table taken away) is the operator's to mend: one line naming the
    command, the store and the server's reason, exit status 2, not an unexpected error."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    statements, said = STORES_SET_UP_WRONG[setup]
    role = f"apidir_reader_{tmp_path.name[-8:].replace('-', '_')}".lower()
    write_entry()
    server = create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    try:
        with scratch_database(postgres_server) as url:
            with ingested_session(url, data_dir / "entries"):
                pass
            admin = create_engine(url, isolation_level="AUTOCOMMIT")
            with admin.connect() as connection:
                for statement in statements:
                    connection.execute(text(statement.format(
                        role=role, database=make_url(url).database)))
            admin.dispose()
            used = make_url(url).set(username=role, password="secret") \
                if setup == "user-without-rights" else make_url(url)
            done = apidir("publish", env=sqlite_env(tmp_path, data_dir) | {
                "APIDIR_DATABASE_URL": used.render_as_string(hide_password=False)})
    finally:  # its rights went with the database
        with server.connect() as connection:
            connection.execute(text(f"DROP ROLE IF EXISTS {role}"))
        server.dispose()
    assert done.returncode == 2, done.stderr
    line = last_line(done)
    assert line.startswith(
        f"apidir: publish failed on the store {used.render_as_string(hide_password=True)}: "), line
    assert said in line and "unexpected" not in line
    assert "secret" not in done.stderr
    assert_no_statement(line)


def test_a_store_path_sqlite_cannot_open_is_one_line(tmp_path: Path, data_dir: Path) -> None:
    """A store SQLite cannot open (here a link to a file in a folder that is not there)."""
    env = sqlite_env(tmp_path, data_dir)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "apidir.db").symlink_to(tmp_path / "gone" / "apidir.db")
    done = apidir("publish", env=env)
    assert done.returncode == 2, done.stderr
    line = one_line(done)
    assert line == (f"apidir: publish failed on the store {env['APIDIR_DATABASE_URL']}: "
                    "unable to open database file")
    assert_no_statement(line)


def refused_store(kind: str, tmp_path: Path, env: dict[str, str]) -> str:
    """The URL of a store `publish` refuses, of `kind`."""
    if kind == "a character device":
        return f"sqlite:///{os.devnull}"
    if kind == "of a newer version":
        return store_of_a_newer_version(env, tmp_path)
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "apidir.db").write_text("not a database\n")
    return env["APIDIR_DATABASE_URL"]


@pytest.mark.parametrize("command", ["publish", "run"])
@pytest.mark.parametrize("kind", ["a character device", "of a newer version", "not SQLite"])
def test_a_refused_store_is_all_publish_says_without_a_base_address(
    tmp_path: Path, data_dir: Path, kind: str, command: str
) -> None:
    """With APIDIR_BASE_URL unset, `publish` and `run` warned that their release would point at
    localhost before they refused the store (`run` amid Prefect's logs, a newer version's store
    once Prefect had started): the warning belongs to a release, and no release was made."""
    env = sqlite_env(tmp_path, data_dir)
    env["APIDIR_DATABASE_URL"] = refused_store(kind, tmp_path, env)
    del env["APIDIR_BASE_URL"]
    done = subprocess.run([sys.executable, "-m", "pipeline.cli", command], cwd=REPO,
                          env={key: value for key, value in os.environ.items()
                               if key != "APIDIR_BASE_URL"} | env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "warning" not in one_line(done)


def not_a_file(kind: str, tmp_path: Path) -> Path:
    """A path naming `kind`, something other than a file."""
    if kind == "a character device":
        return Path(os.devnull)
    path = tmp_path / "store"
    if kind == "a directory":
        path.mkdir()
    else:
        os.mkfifo(path)
    return path


STORE_COMMANDS = (["db", "current"], ["db", "upgrade"], ["db", "downgrade", "0001"],
                  ["db", "compact"], ["db", "backup", "COPY"], ["db", "close-run", "1"],
                  ["publish"], ["run"], ["backfill", "2026-11-01", "2026-11-02"])


@pytest.mark.parametrize(("command", "kind"), [
    *((command, "a character device") for command in STORE_COMMANDS),
    *((command, kind) for kind in ("a directory", "a FIFO")
      for command in (["db", "current"], ["db", "upgrade"], ["run"]))])
def test_a_store_path_naming_no_file_is_one_line_and_nothing_is_made(
    tmp_path: Path, data_dir: Path, command: list[str], kind: str
) -> None:
    """A SQLite store's path naming a device, a directory or a FIFO is refused before the
    store is opened, naming the URL and what the path is: SQLite read /dev/zero as an empty
    database ("schema revision none"), then failed to upgrade it and left a journal beside the
    device; a folder was "unable to open database file"; a FIFO's first read never ends."""
    path = not_a_file(kind, tmp_path)
    url = f"sqlite:///{path}"
    command = [str(tmp_path / "copy.db") if word == "COPY" else word for word in command]
    done = apidir(*command, env=sqlite_env(tmp_path, data_dir) | {"APIDIR_DATABASE_URL": url},
                  timeout=30)
    assert done.returncode == 2, done.stderr
    assert one_line(done) == (
        f"apidir: the store {url} (APIDIR_DATABASE_URL) is {kind}, not a SQLite file: set "
        "APIDIR_DATABASE_URL to a file, as sqlite:///FILE")
    assert [beside.name for beside in path.parent.iterdir()  # no journal or lock beside it
            if beside.name.startswith(path.name)] == [path.name]
    assert not (tmp_path / "copy.db").exists() and not (tmp_path / "public").exists()


def test_an_entry_size_limit_past_reason_is_one_setting_line(
    tmp_path: Path, data_dir: Path
) -> None:
    done = apidir("validate", env=sqlite_env(tmp_path, data_dir) | {
        "APIDIR_ENTRY_MAX_BYTES": "9223372036854775807"})
    assert done.returncode == 2
    assert one_line(done) == ("apidir: invalid setting: APIDIR_ENTRY_MAX_BYTES: Input should be "
                              "less than or equal to 67108864")


@pytest.mark.parametrize("limit", [sys.maxsize, 2**62, 10**15])
def test_an_entry_file_is_read_whole_under_a_limit_beyond_memory(
    write_entry: WriteEntry, data_dir: Path, limit: int
) -> None:
    """The reader never asks for the whole limit at once: a limit past memory or an index reads
    the file as any other (read_catalog reads each file so too)."""
    from pipeline.catalogue.entries import read_catalog, read_entry_file

    path = write_entry()
    entry_id, entry, problems = read_entry_file(path, data_dir / "entries", limit)
    assert (entry_id, problems) == ("example-weather", []) and entry is not None
    report = read_catalog([data_dir / "entries"], data_dir / "entries", max_bytes=limit)
    assert not report.problems and len(report.entries) == 1


@pytest.mark.parametrize("variable", ["APIDIR_CHANGES_DAYS", "APIDIR_PROBES_KEPT_DAYS",
                                      "APIDIR_DEAD_DAYS"])
def test_days_past_what_a_date_reaches_are_one_setting_line(
    write_entry: WriteEntry, tmp_path: Path, data_dir: Path, variable: str
) -> None:
    write_entry()
    done = apidir("publish", env=sqlite_env(tmp_path, data_dir) | {variable: "1000000"})
    assert done.returncode == 2
    assert one_line(done) == (f"apidir: invalid setting: {variable}: Input should be less "
                              "than or equal to 3660")


@pytest.mark.parametrize(("start", "end", "line"), [
    ("9999-12-30", "9999-12-31", "END 9999-12-31 is after today ({today}, UTC): a backfill "
                                 "rolls up days that have begun"),
    ("0001-01-01", "0001-01-02", "START 0001-01-01 is before 1970-01-01: no probe is that old"),
])
def test_a_backfill_of_days_no_probe_can_have_names_the_date(
    tmp_path: Path, data_dir: Path, start: str, end: str, line: str
) -> None:
    from datetime import UTC, datetime

    before = datetime.now(UTC).date()
    done = apidir("backfill", start, end, env=sqlite_env(tmp_path, data_dir))
    after = datetime.now(UTC).date()
    assert done.returncode == 2
    # the command reads today itself: one of the days it ran on, if midnight passed meanwhile
    assert one_line(done) in {"apidir: " + line.format(today=today) for today in (before, after)}


async def test_a_backfill_of_no_active_entry_opens_no_run_and_alerts_no_one(
    tmp_path: Path, data_dir: Path
) -> None:
    """A mistyped (or retired) entry is bad input, told in one line and refused before the run
    is opened (the flow's own log aside): no run is recorded, and the alert webhook is not
    called."""
    from datetime import UTC, datetime

    today = datetime.now(UTC).date().isoformat()
    hook = await WebhookReceiver().start()
    try:
        env = sqlite_env(tmp_path, data_dir) | {"APIDIR_ALERT_WEBHOOK_URL": hook.url}
        done = await asyncio.to_thread(apidir, "backfill", today, today, "--entry", "nosuch",
                                       env=env)
    finally:
        await hook.close()
    assert done.returncode == 2
    told = [line for line in done.stderr.splitlines() if line.startswith("apidir: ")]
    assert told == ["apidir: select stage failed: UnknownSelectionError: no active entries for: "
                    "nosuch"]
    assert "Traceback" not in done.stderr
    assert hook.received == []
    with sqlite3.connect(tmp_path / "var" / "apidir.db") as store:
        assert store.execute("SELECT count(*) FROM pipeline_run").fetchone() == (0,)
    store.close()


@pytest.mark.parametrize("command", [["openapi"], ["entry-schema"],
                                     ["draft", "docs/openapi.json"]])
def test_a_document_for_a_closed_standard_output_is_one_line(command: list[str]) -> None:
    done = subprocess.run(["sh", "-c", 'exec "$0" -m pipeline.cli "$@" >&-', sys.executable,
                           *command], cwd=REPO, capture_output=False, stderr=subprocess.PIPE,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == ["apidir: standard output is closed"]


@pytest.mark.parametrize("base_url", ["", "not a url", "ftp://directory.test",
                                      "https://directory.test/a b"])
@pytest.mark.parametrize("command", ["publish", "validate"])
def test_a_base_url_the_release_cannot_name_is_told_as_its_setting(
    write_entry: WriteEntry, tmp_path: Path, data_dir: Path, base_url: str, command: str
) -> None:
    write_entry()
    done = apidir(command, env=sqlite_env(tmp_path, data_dir) | {"APIDIR_BASE_URL": base_url})
    assert done.returncode == 2
    line = one_line(done)
    assert line.startswith("apidir: invalid setting: APIDIR_BASE_URL: Value error, must ")
    assert "APIDIR_SOURCE" not in line and not (tmp_path / "public").exists()


def test_a_model_that_is_not_the_settings_is_never_named_as_a_setting() -> None:
    from pydantic import ValidationError

    from pipeline.cli import one_line as told
    from pipeline.contract import Meta

    with pytest.raises(ValidationError) as refused:
        Meta.model_validate({"source": "not a url"})
    line = told(refused.value)
    assert line.startswith("invalid Meta: ") and "source: Value error, must be an absolute" \
        in line and "APIDIR_" not in line


def cpu_seconds(pid: int) -> float:
    """The CPU time process `pid` has used so far (Linux: /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_ctrl_c_during_validate_says_interrupted(tmp_path: Path) -> None:
    """Typer turns Ctrl-C into a quiet exit 130; the command still says why it stopped."""
    from bench.synthetic import write_catalogue

    write_catalogue(REPO / "data", tmp_path / "data", 4000)
    # A process started with SIGINT ignored keeps it ignored (Python installs its Ctrl-C handler
    # only over the default), and a long test session may have it so: the command starts as
    # from a terminal, with Python's own handler.
    terminal = ("import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "runpy.run_module('pipeline.cli', run_name='__main__')")
    busy = subprocess.Popen([sys.executable, "-c", terminal, "validate"], cwd=REPO,
                            env={**os.environ, "APIDIR_DATA_DIR": str(tmp_path / "data")},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while cpu_seconds(busy.pid) < 1.5 and time.monotonic() < deadline:  # past start-up
            assert busy.poll() is None, "validate ended before it was interrupted"
            time.sleep(0.05)
        busy.send_signal(signal.SIGINT)
        out, err = busy.communicate(timeout=60)
    finally:
        busy.kill()
    assert busy.returncode == 130, f"exit {busy.returncode}: stdout {out[-300:]!r}, " \
                                   f"stderr {err[-300:]!r}"
    assert "valid" not in out
    assert err.strip().splitlines() == ["apidir: interrupted"]


@pytest.mark.parametrize(("variable", "value", "said"), [
    ("APIDIR_PROBE_INTERVAL", "inf", "Input should be a finite number"),
    ("APIDIR_PROBE_INTERVAL", "1e12", "Input should be less than or equal to 60"),
    ("APIDIR_PROBE_INTERVAL", "nan", "Input should be a finite number"),
    ("APIDIR_PROBE_CONNECT_TIMEOUT", "inf", "Input should be a finite number"),
    ("APIDIR_PROBE_TIMEOUT", "1e12", "Input should be less than or equal to 600"),
    ("APIDIR_PROBE_ATTEMPTS", "100000", "Input should be less than or equal to 10"),
    ("APIDIR_RETRY_DELAY", "inf", "Input should be a finite number"),
    ("APIDIR_RUN_TIMEOUT", "inf", "Input should be a finite number"),
    ("APIDIR_PUBLISH_LOCK_TIMEOUT", "inf", "Input should be a finite number"),
    ("APIDIR_PUBLISH_LOCK_TIMEOUT", "1e12", "Input should be less than or equal to 604800"),
    ("APIDIR_ALERT_TIMEOUT", "inf", "Input should be a finite number"),
    ("APIDIR_ALERT_TIMEOUT", "1e12", "Input should be less than or equal to 600"),
])
def test_a_probe_wait_without_end_is_one_setting_line(variable: str, value: str, said: str
                                                      ) -> None:
    """`inf` seconds between two requests to a host had `apidir probe` wait for ever."""
    done = apidir("probe", "--allow-private", "http://127.0.0.1:9/", "http://127.0.0.1:9/b",
                  env={variable: value})
    assert done.returncode == 2
    assert one_line(done) == f"apidir: invalid setting: {variable}: {said}"


@pytest.mark.parametrize(("name", "content", "said"), [
    ("missing.pem", None, "{path}: no such file"),
    ("notes.txt", "my notes\n", "{path}: not a PEM file of certificates (no certificate in it)"),
    ("broken.pem", "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
     "{path}: not a PEM file of certificates ([X509] PEM lib)"),
    ("folder", "", "{path}: a folder, not a PEM file of certificates"),
    ("", None, "empty: name a PEM file of certificate authorities, or unset it"),
])
def test_a_ca_file_the_prober_cannot_load_is_one_setting_line(
    tmp_path: Path, name: str, content: str | None, said: str
) -> None:
    """The prober loaded the file when a probe stage began: a missing one said `[Errno 2] No
    such file or directory`, naming neither the file nor the setting."""
    path = tmp_path / name if name else ""
    if content == "":
        (tmp_path / name).mkdir()
    elif content is not None:
        (tmp_path / name).write_text(content)
    done = apidir("probe", "--allow-private", "http://127.0.0.1:9/",
                  env={"APIDIR_PROBE_CA_FILE": str(path)})
    assert done.returncode == 2
    assert one_line(done) == ("apidir: invalid setting: APIDIR_PROBE_CA_FILE: Value error, "
                              + said.format(path=path))


def test_a_ca_file_of_certificates_is_trusted(tmp_path: Path) -> None:
    from pipeline.settings import Settings
    from tests.fake_internet import self_signed_context

    self_signed_context(tmp_path)
    settings = Settings(probe_ca_file=tmp_path / "cert.pem")
    assert settings.probe_settings().ca_file == str(tmp_path / "cert.pem")


@pytest.mark.parametrize(("url", "said"), [
    ("not a url", "must be an http:// or https:// address, as https://HOST/PATH"),
    ("ftp://hooks.test/t0ken", "must be an http:// or https:// address, not ftp://"),
    ("https:///t0ken", "must name a host, as https://HOST/PATH"),
    ("https://hooks.test:99999/t0ken", "not a URL (Port out of range 0-65535)"),
    ("https://hooks.test/t0ken here", "must be one address, without spaces"),
])
def test_a_webhook_alerts_cannot_reach_is_one_setting_line(url: str, said: str) -> None:
    """Such an address was tried three times when a run had something to tell, then logged
    as `InvalidUrlClientError: not%20a%20url`; the line never repeats it (its token)."""
    done = apidir("probe", "--allow-private", "http://127.0.0.1:9/",
                  env={"APIDIR_ALERT_WEBHOOK_URL": url})
    assert done.returncode == 2
    assert one_line(done) == ("apidir: invalid setting: APIDIR_ALERT_WEBHOOK_URL: Value error, "
                              + said)
    assert "t0ken" not in done.stderr


@pytest.mark.parametrize("webhook", ["https://hooks.test/alerts", ""])
def test_automations_for_a_prefect_server_that_is_down_name_its_address(webhook: str) -> None:
    """The client's own words (`ConnectError: All connection attempts failed`) named no
    address, and ended as an unexpected error. Unset, the webhook is first looked up on the
    server, as a Secret block."""
    import socket

    with socket.socket() as closed:  # a port nobody listens on
        closed.bind(("127.0.0.1", 0))
        api = f"http://127.0.0.1:{closed.getsockname()[1]}/api"
        done = apidir("automations", "apply", env={"PREFECT_API_URL": api,
                                                   "APIDIR_ALERT_WEBHOOK_URL": webhook})
    assert done.returncode == 2
    assert one_line(done) == (f"apidir: the Prefect server at {api} (PREFECT_API_URL) cannot be "
                              "reached: All connection attempts failed")


def test_a_run_id_past_what_a_store_holds_is_no_run(tmp_path: Path, data_dir: Path) -> None:
    """`db close-run` of a number past 64 bits: SQLite cannot bind it, and the command ended
    in an unexpected OverflowError; it names no run, as any unknown id."""
    env = sqlite_env(tmp_path, data_dir)
    assert apidir("db", "upgrade", env=env).returncode == 0
    done = apidir("db", "close-run", str(2**64), env=env)
    assert done.returncode == 2, done.stderr
    assert one_line(done) == f"apidir: no run {2**64} in the store"


def test_a_backfill_over_pruned_days_names_them_in_one_line_and_keeps_their_rollups(
    write_entry: WriteEntry, tmp_path: Path, data_dir: Path
) -> None:
    """Days whose raw probes were pruned can no longer be computed again: a backfill reaching
    them is refused in one line naming every such day, as stretches of consecutive days,
    before any run opens; their stored rollups stay as they were and no release is written."""
    from datetime import UTC, datetime, timedelta

    from sqlmodel import func, select

    from pipeline.judging.rollup import prune_probes, roll_up_days
    from pipeline.store.history import plan_targets, record_probes
    from pipeline.store.tables import DailyEntryRollup, PipelineRun, start_run
    from tests.test_history import result

    write_entry()
    env = sqlite_env(tmp_path, data_dir)
    today = datetime.now(UTC).date()
    old = [today - timedelta(days=back) for back in (45, 44, 43, 41)]  # 42: a night not run
    recent = today - timedelta(days=20)
    with ingested_session(env["APIDIR_DATABASE_URL"], data_dir / "entries") as session:
        url = plan_targets(session)[0].url
        for day in [*old, recent]:
            run = start_run(session, "nightly")
            record_probes(session, run, [result(url, "live", 200, 90.0, at=datetime.combine(
                day, datetime.min.time(), tzinfo=UTC) + timedelta(hours=3))])
        roll_up_days(session, [*old, recent])
        assert [day for day, _ in prune_probes(session, today, 31)] == old
        rolled = [row.model_dump() for row in session.exec(select(DailyEntryRollup))]
        runs = session.exec(select(func.count()).select_from(PipelineRun)).one()

    done = apidir("backfill", (old[0] - timedelta(days=1)).isoformat(), recent.isoformat(),
                  env=env)
    assert done.returncode == 2
    assert one_line(done) == (
        f"apidir: the raw probes of {old[0]} to {old[2]} (3 days), {old[3]} were pruned "
        "(APIDIR_PROBES_KEPT_DAYS): those days can no longer be computed again, and their "
        f"stored rollups stand as they are; the days from {old[3] + timedelta(days=1)} on can "
        "be")
    with ingested_session(env["APIDIR_DATABASE_URL"], data_dir / "entries") as session:
        assert [row.model_dump() for row in session.exec(select(DailyEntryRollup))] == rolled
        assert session.exec(select(func.count()).select_from(PipelineRun)).one() == runs
    assert not (tmp_path / "public").exists()
