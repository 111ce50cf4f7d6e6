"""Shared fixtures: a valid entry factory, a scratch data folder, a database on every backend,
and one Prefect harness."""

from __future__ import annotations

import copy
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import pytest_asyncio
import yaml
from fake_internet import FakeServer, self_signed_context
from pydantic import BaseModel

from tests.postgres_server import running_server, scratch_database

if TYPE_CHECKING:
    from sqlmodel import Session

REPO = Path(__file__).resolve().parent.parent

# Every test that uses `database_url` (directly or through `settings_env`) runs once per backend.
BACKENDS = ("sqlite", "postgres")
POSTGRES_URL_VARIABLE = "APIDIR_TEST_POSTGRES_URL"

VALID_ENTRY: dict[str, Any] = {
    "id": "example-weather",
    "name": "Example Weather",
    "provider": "Example Inc.",
    "category": "weather",
    "description": "Hourly forecasts for any coordinates.",
    "longDescription": "A forecast API used by the tests.",
    "color": "#1a73e8",
    "tags": ["forecast", "open-data"],
    "authType": "api-key",
    "authDescription": "Send the key in the X-Api-Key header.",
    "authExample": "X-Api-Key: YOUR_API_KEY",
    "baseUrl": "https://api.example.com/v1",
    "docsUrl": "https://docs.example.com/api",
    "hasFreeTier": True,
    "pricing": {
        "model": "freemium",
        "startingCentsPerMonth": 0,
        "freeQuota": {"amount": 1000, "unit": "requests", "period": "day", "note": None},
        "tiers": [
            {"name": "Free", "monthlyCents": 0, "included": "1,000 requests/day"},
            {"name": "Pro", "monthlyCents": 2900, "included": "100,000 requests/month"},
        ],
        "unitCost": None,
        "details": "Free up to 1,000 requests a day.",
    },
    "rateLimit": "60 requests/minute",
    "endpoints": [
        {"method": "GET", "path": "/forecast", "description": "Forecast for a location."},
        {"method": "GET", "path": "/current", "description": "Current conditions."},
        {"method": "GET", "path": "/stations/{stationId}", "description": "One station."},
    ],
    "sampleRequest": 'curl -H "X-Api-Key: YOUR_API_KEY" "https://api.example.com/v1/forecast?lat=1&lon=2"',
    "sampleResponse": '{"lat": 1, "lon": 2, "hourly": []}',
    "sources": ["https://docs.example.com/api"],
    "verified": "2026-11-21",
}


def model_json_of(model: type[BaseModel], form: Mapping[str, Any]) -> bytes:
    """What `model` writes for the value whose JSON form is `form`: a JSON form the score stage
    builds without the model must be this, byte for byte (every field, in the model's order)."""
    return model.model_validate(form).model_dump_json().encode()


def unusable_lock_file(path: Path, kind: str, elsewhere: Path) -> None:
    """Put at `path` what a lock may not open as its file: a link to `elsewhere` ("link", or
    "dangling link" where `elsewhere` does not exist), a "folder", a "fifo", or a second name
    of `elsewhere` (any other kind)."""
    if kind in ("link", "dangling link"):
        path.symlink_to(elsewhere)
    elif kind == "folder":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        os.link(elsewhere, path)


def make_entry(**changes: Any) -> dict[str, Any]:
    """A valid entry with `changes` applied; a value of None removes the key."""
    entry = copy.deepcopy(VALID_ENTRY)
    for key, value in changes.items():
        if value is None:
            entry.pop(key, None)
        else:
            entry[key] = value
    return entry


def listed_endpoint_ids(session: Session, entry_id: str) -> list[int]:
    """The store's ids of an entry's endpoints, in listed order: what the prober links its
    probes of them to (a probe of no endpoint is of the base address standing in for them)."""
    from sqlmodel import select

    from pipeline.store.tables import EndpointRow

    return list(session.exec(select(EndpointRow.id).where(EndpointRow.entry_id == entry_id)
                             .order_by(EndpointRow.position)))


def hold_the_write_lock(database: str | Path, seconds: float, *,
                        taken: threading.Event | None = None,
                        start: Callable[[], bool] = lambda: True,
                        end: Callable[[], bool] = lambda: True) -> None:
    """Another writer (a shard storing its probes, a day's rollup) holding a SQLite store's
    write lock on a connection of its own: taken once `start()` is true (`taken` is set then),
    let go `seconds` after `end()` is; each wait gives up after a minute."""
    deadline = time.monotonic() + 60
    while not start() and time.monotonic() < deadline:
        time.sleep(0.01)
    other = sqlite3.connect(database, isolation_level=None, timeout=30)
    try:
        other.execute("BEGIN IMMEDIATE")
        if taken is not None:
            taken.set()
        while not end() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(seconds)
        other.execute("COMMIT")
    finally:
        if taken is not None:
            taken.set()
        other.close()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """A data folder with the real categories and no entries."""
    data = tmp_path / "data"
    (data / "entries").mkdir(parents=True)
    (data / "categories.yaml").write_text((REPO / "data" / "categories.yaml").read_text())
    return data


WriteEntry = Callable[..., Path]


@pytest.fixture
def write_entry(data_dir: Path) -> WriteEntry:
    """Write an entry as `entries/<category>/<id>.yaml` (or `text` verbatim) and return its path."""

    def write(
        entry: dict[str, Any] | None = None,
        *,
        text: str | None = None,
        category: str | None = None,
        name: str | None = None,
    ) -> Path:
        entry = entry if entry is not None else make_entry()
        folder = data_dir / "entries" / (category or entry.get("category", "weather"))
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name or entry.get('id', 'unnamed')}.yaml"
        path.write_text(text if text is not None else yaml.safe_dump(entry, sort_keys=False))
        return path

    return write


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every test of a store runs on each backend, or on those its `backends` mark names (a
    test of one database's own behaviour, such as SQLite's write lock)."""
    if "database_url" in metafunc.fixturenames:
        named = metafunc.definition.get_closest_marker("backends")
        metafunc.parametrize("database_url", named.args if named else BACKENDS, indirect=True)


@pytest.fixture(autouse=True, scope="session")
def private_temporary_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The system's temporary folder of this session alone (`TMPDIR`, for the processes it
    starts too): the runs' hand-over files live there, and tests that check no file is left
    behind must not see those of another suite running at the same time."""
    folder = tmp_path_factory.mktemp("tmp")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", str(folder))
        patch.setattr(tempfile, "tempdir", None)  # read again from TMPDIR
        yield folder


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A PostgreSQL server for the session: APIDIR_TEST_POSTGRES_URL, else one started here
    from the installed binaries (stopped and removed at the end)."""
    given = os.environ.get(POSTGRES_URL_VARIABLE)
    if given:
        yield given
        return
    with running_server(REPO / "var" / "test-postgres") as url:
        if url is None:
            pytest.skip(f"PostgreSQL is not installed (`make test` installs it) and "
                        f"{POSTGRES_URL_VARIABLE} is not set")
        yield url


@pytest.fixture
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty store: a SQLite file, or a new database on the PostgreSQL server."""
    if getattr(request, "param", "sqlite") == "sqlite":
        yield f"sqlite:///{tmp_path / 'var' / 'apidir.db'}"
        return
    with scratch_database(request.getfixturevalue("postgres_server")) as url:
        yield url


@contextmanager
def ingested_session(database_url: str, entries: Path,
                     expire_on_commit: bool = True) -> Iterator[Session]:
    """A session on the store at `database_url` once it ingested the entry files under
    `entries`; its engine disposed when the block ends."""
    from sqlmodel import Session

    from pipeline.catalogue.entries import read_catalog
    from pipeline.catalogue.ingest import ingest_catalog
    from pipeline.store.tables import make_engine

    engine = make_engine(database_url)
    try:
        with Session(engine, expire_on_commit=expire_on_commit) as session:
            ingest_catalog(session, read_catalog([entries], entries))
            yield session
    finally:
        engine.dispose()


@pytest.fixture
def ingested_store(database_url: str, data_dir: Path) -> Iterator[Callable[[], Session]]:
    """Call it once the test's entries are written: a session on a store that ingested them."""
    with ExitStack() as opened:

        def ingest() -> Session:
            return opened.enter_context(
                ingested_session(database_url, data_dir / "entries", expire_on_commit=False))

        yield ingest


@pytest.fixture
def settings_env(
    database_url: str, data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, str]:
    """APIDIR_* variables pointing every setting at the temporary folder and database."""
    env = {
        "APIDIR_DATA_DIR": str(data_dir),
        "APIDIR_DATABASE_URL": database_url,
        "APIDIR_OUTPUT_DIR": str(tmp_path / "public"),
        "APIDIR_BASE_URL": "https://directory.test",
    }
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return env


@pytest_asyncio.fixture(loop_scope="function")  # its server lives in the test's loop
async def https_provider(tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeServer]:
    """A provider on loopback (HTTPS, its certificate trusted by the prober), probed through
    the real probe stage: one request a look, no waits."""
    folder = tmp_path / "tls"
    folder.mkdir()
    server = await FakeServer(ssl_context=self_signed_context(folder)).start()
    for name, value in {"PROBE_ALLOW_PRIVATE": "true", "PROBE_CA_FILE": folder / "cert.pem",
                        "PROBE_ATTEMPTS": 1, "PROBE_INTERVAL": 0, "PROBE_TIMEOUT": 2,
                        "PROBE_CONNECT_TIMEOUT": 2}.items():
        monkeypatch.setenv(f"APIDIR_{name}", str(value))
    yield server
    await server.close()


@pytest.fixture(scope="session")
def prefect_backend() -> Iterator[None]:
    """One ephemeral Prefect backend for the whole session (its start is slow)."""
    from prefect.testing.utilities import prefect_test_harness

    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    with prefect_test_harness(server_startup_timeout=120):
        yield
