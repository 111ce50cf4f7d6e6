"""Run-time settings: embedded defaults, overridden by `APIDIR_*` environment variables."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from pipeline.probing.probe import ProbeSettings

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

# The fewest days of raw probes a store may keep: the score stage's longest window (30 days)
# and the day it starts in, which it reads raw (`judging.evidence.evidence_days`).
PROBES_KEPT_MIN_DAYS = 31
# The largest size limit of an entry file: a few KiB is an entry with samples; a limit past
# this is a mistake (and one beyond memory would have each file's read ask for all of it).
ENTRY_MAX_BYTES_LIMIT = 64 * 1024 * 1024
# The most days a setting counting days may hold (ten years): the days are subtracted from
# today, and a count past what a date can reach back to is a mistake, not a wish.
MAX_DAYS = 3660
# Bounds of the settings counting seconds or tries: each finite (`inf` would have a probe
# wait, or a run be waited for, for ever) and no longer than a patient operator means.
MAX_PROBE_INTERVAL = 60.0  # a minute between two requests to one host
MAX_PROBE_TIMEOUT = 600.0  # ten minutes to connect, to response headers, for an alert
MAX_TRIES = 10  # tries of a probe, retries of a stage: each waits twice the last
DAY = 24 * 3600.0

# (backend, driver) pairs the store runs on: the default driver of each backend (`sqlite://`
# and `postgresql://` name them), synchronous, and installed with the pipeline.
SUPPORTED_DRIVERS = {("sqlite", "pysqlite"), ("postgresql", "psycopg")}
SUPPORTED_FORMS = "sqlite:///FILE or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"
# The options of a SQLite URL that its driver takes, beside the file. The others are SQLite
# URI options (`mode=ro`, `cache`, `immutable`): without `uri=true` the driver ignores them
# (SQLAlchemy warns), with it they would name the file differently from the store's locks.
SQLITE_OPTIONS = {"timeout", "isolation_level", "detect_types", "check_same_thread",
                  "cached_statements"}
MAX_PORT = 65535
# What each path setting that may not be empty names (Path("") is the working folder).
_NAMED_PATHS = {
    "output_dir": "the folder the release is published to",
    "probe_ca_file": "a PEM file of certificate authorities, or unset it",
}
# A SQLite file's URL without options, the default's form: known good without SQLAlchemy,
# whose import (a tenth of a second) a command that never opens the store is spared. A file
# named as a SQLite URI (`file:…`) is not one of them (`SQLITE_URI_PREFIX`).
_PLAIN_SQLITE_URL = re.compile(r"sqlite(\+pysqlite)?://(/(?!file:)[^?#]*)?")
# How a SQLite URI begins. Named as a store's file, without `uri=true` the driver opens a
# file of that very name under the working folder (`file:/x.db` is `./file:/x.db`, its
# folders made), while SQLite itself, where built to read URIs, opens the file the URI names:
# two stores for one setting, and neither the file the operator meant for sure.
SQLITE_URI_PREFIX = "file:"


def shown(url: URL) -> str:
    """A URL as a line may show it: its password hidden."""
    return url.render_as_string(hide_password=True)


def database_url_problem(database_url: str) -> str | None:
    """Checked when the settings are read, so a URL this version cannot use is one line naming
    APIDIR_DATABASE_URL, not an error of the driver in the middle of a command (a missing
    module, an async driver's MissingGreenlet, a port or timeout that is not a number).

    What makes `database_url` one the store cannot open, in a few words (with the URL,
    its password hidden); None when it is one. Only what is known without connecting: a
    server that does not answer is told when a command connects."""
    if _PLAIN_SQLITE_URL.fullmatch(database_url):
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        url = make_url(database_url)
    except ArgumentError:
        return f"not a database URL; use {SUPPORTED_FORMS}"
    except ValueError:  # SQLAlchemy reads a port as a number
        return f"not a database URL: its port is not a number; use {SUPPORTED_FORMS}"
    try:
        driver = (url.get_backend_name(), url.get_driver_name())
    except (ArgumentError, ImportError):  # a backend SQLAlchemy does not know at all
        driver = (url.get_backend_name(), None)
    if driver not in SUPPORTED_DRIVERS:
        return (f"{shown(url)}: the store runs on SQLite and on PostgreSQL through psycopg, "
                f"not {url.drivername}; use {SUPPORTED_FORMS}")
    if url.port is not None and not 0 < url.port <= MAX_PORT:
        return f"{shown(url)}: its port {url.port} is not between 1 and {MAX_PORT}"
    if url.get_backend_name() == "sqlite" and (url.database or "").startswith(SQLITE_URI_PREFIX):
        return (f"a SQLite URI ({SQLITE_URI_PREFIX}…) is not supported: SQLite reads it as a "
                "file of that name under the working folder or as the file it names, as it is "
                "opened; name the file itself, as sqlite:///FILE (sqlite:////var/x.db for "
                "/var/x.db)")
    if url.get_backend_name() == "sqlite" and (others := sorted(set(url.query) - SQLITE_OPTIONS)):
        return (f"{shown(url)}: SQLite URI options are not supported ({', '.join(others)}): the "
                "store is one file its commands write, never opened read-only; use "
                "sqlite:///FILE, with ?timeout=SECONDS if need be")
    try:
        url.get_dialect()().create_connect_args(url)
    except (ArgumentError, ValueError, TypeError) as exc:
        return f"{shown(url)}: an option of the URL is wrong ({exc})"
    return None


def ca_file_problem(path: Path) -> str | None:
    """Checked when the settings are read, so a file the prober cannot trust is one line naming
    APIDIR_PROBE_CA_FILE and the file, not OpenSSL's words (naming neither) when a probe stage
    starts. What keeps `path` from loading as certificates, in a few words; None when it loads.
    Loaded into a bare context: the system's certificates are not read for it."""
    import ssl

    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except ssl.SSLError as exc:  # before OSError, which it is
        why = "no certificate in it" if exc.reason == "NO_CERTIFICATE_OR_CRL_FOUND" else \
            re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(exc))  # OpenSSL's words, not its source line
        return f"{path}: not a PEM file of certificates ({why})"
    except FileNotFoundError:
        return f"{path}: no such file"
    except IsADirectoryError:
        return f"{path}: a folder, not a PEM file of certificates"
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    return None


def webhook_url_problem(url: str) -> str | None:
    """Checked when the settings are read, so an address no alert can be POSTed to is one line
    naming APIDIR_ALERT_WEBHOOK_URL, not three failed tries when a run has something to tell.
    What keeps `url` from being one, in a few words that never repeat it (a webhook's address
    often holds its token); None when it is one."""
    from yarl import URL

    try:
        parsed = URL(url)
    except ValueError as exc:  # yarl parses it as aiohttp will: a port past 65535, a bad IPv6
        return f"not a URL ({exc})"
    if parsed.scheme not in ("http", "https"):
        return "must be an http:// or https:// address, " + (
            f"not {parsed.scheme}://" if parsed.scheme else "as https://HOST/PATH")
    if not parsed.host:
        return f"must name a host, as {parsed.scheme}://HOST/PATH"
    if any(character.isspace() for character in url):
        return "must be one address, without spaces"
    return None


class Settings(BaseSettings):
    """Everything runs with no configuration; each field is `APIDIR_<NAME>` in the environment."""

    model_config = SettingsConfigDict(env_prefix="APIDIR_", extra="ignore")

    data_dir: Path = Field(
        default=Path("data"), description="Curated input: categories and entries."
    )
    entry_max_bytes: int = Field(
        default=256 * 1024, ge=1024, le=ENTRY_MAX_BYTES_LIMIT,
        description="Size limit of one entry file; a larger file is reported, never read.",
    )
    database_url: str = Field(
        default="sqlite:///var/apidir.db", description="SQLAlchemy URL of the store."
    )
    database_upgrade: Literal["auto", "check"] = Field(
        default="auto",
        description="auto: upgrade the store's schema on start; check: refuse an older schema "
        "and name the command that upgrades it (apidir db upgrade).",
    )
    output_dir: Path = Field(
        default=Path("public"), description="Folder the release is published to."
    )
    base_url: str = Field(
        default="http://localhost:8000",
        description="Address the output folder is served from; used in meta.source.",
    )
    after_publish: str | None = Field(
        default=None,
        description="Command run each time a release goes live, such as `nginx -s reload` "
        "(nginx reads a release's renamed addresses, `_renamed.map`, as it loads) or a CDN "
        "purge: split into words as a shell would, run without a shell, given the output "
        "folder in APIDIR_PUBLISHED, and stopped after 60 s; a failure fails the publish in "
        "one line, the new release staying live (unset: none).",
    )

    probe_enabled: bool = Field(
        default=True, description="Probe the endpoints (off: publish from stored history only)."
    )
    probe_concurrency: int = Field(default=64, ge=1, description="Probes in flight at once.")
    probe_per_host: int = Field(
        default=2, ge=0, description="Probes in flight per host (0: no cap)."
    )
    probe_interval: float = Field(
        default=0.5, ge=0, le=MAX_PROBE_INTERVAL, allow_inf_nan=False,
        description="Seconds between request starts to one host."
    )
    probe_connect_timeout: float = Field(
        default=5.0, gt=0, le=MAX_PROBE_TIMEOUT, allow_inf_nan=False,
        description="Seconds to connect.")
    probe_timeout: float = Field(
        default=15.0, gt=0, le=MAX_PROBE_TIMEOUT, allow_inf_nan=False,
        description="Seconds to response headers.")
    probe_attempts: int = Field(
        default=3, ge=1, le=MAX_TRIES, description="Tries for transient failures.")
    probe_host_failures: int = Field(
        default=10, ge=0,
        description="Requests to one host in a row failing transiently (timeout, reset, 5xx, "
        "429; each attempt of a URL, retries too, counted at the host it ended on: a redirect "
        "followed is no part of the row) before the host is given up for the run: its "
        "targets not yet probed are not, and keep their last status (0: never).")
    probe_host_budget: float = Field(
        default=120.0, ge=0, le=DAY, allow_inf_nan=False,
        description="Seconds one host's transient failures may cost a run (their attempts "
        "and the waits before the host's next attempt: backoff, Retry-After) before it is "
        "given up (0: no budget).")
    probe_allow_private: bool = Field(
        default=False,
        description="Turn the network guard off (local testing only): private addresses allowed.",
    )
    probe_shards: int = Field(
        default=1,
        ge=1,
        description="Split the probe stage into this many shards by host, each a Prefect task "
        "in a process of its own (1: one task in the flow's process). Limits apply per shard.",
    )
    probe_workers: int = Field(
        default=0, ge=0, description="Processes probing shards at once (0: one per usable core)."
    )
    probe_deployment: str | None = Field(
        default=None,
        pattern=r"^[^/\s]+/[^/\s]+$",
        description="Prefect deployment (flow/deployment, e.g. probe-shard/probe-shard) whose "
        "flow runs probe the shards on the workers of its work pool, on any machine; the "
        "shards' targets go through the store (unset: shards are processes of this machine).",
    )
    probe_confirm: bool = Field(
        default=True,
        description="Probe a failed target once more at the end of the run; only a failure "
        "seen twice counts (off: one look decides).",
    )
    probe_ca_file: Path | None = Field(
        default=None,
        description="PEM file of extra certificate authorities to trust, beside the system's.",
    )
    failing_runs: int = Field(
        default=3, ge=1,
        description="Consecutive runs in which no target of an entry answered before its "
        "lifecycle is `failing`.",
    )
    dead_days: int = Field(
        default=14, ge=1, le=MAX_DAYS,
        description="Days an entry must be confirmed dead (404/410 or no such host on every "
        "target) before its lifecycle is `dead`.",
    )

    publish_pages: bool = Field(
        default=True, description="Publish the reader pages with the JSON (off: JSON only)."
    )
    publish_spare: bool = Field(
        default=True,
        description="Keep the release a publish replaces beside the output folder, for the next "
        "publish to write its entry files over (off: it is deleted; half the disk, but every "
        "file written anew).",
    )
    publish_lock_timeout: float = Field(
        default=3600.0, gt=0, le=7 * DAY, allow_inf_nan=False,
        description="Seconds a publisher waits for another one to finish before giving up "
        "(at most a week: `inf` would have a publisher wait for ever behind a hung one).",
    )
    store_lock_timeout: float = Field(
        default=3600.0, gt=0, le=7 * DAY, allow_inf_nan=False,
        description="Seconds a run's ingest or rollup waits for another run's to finish "
        "before giving up (at most a week), naming the run that holds the store.",
    )
    store_lock_keepalive: int = Field(
        default=120, ge=4, le=int(DAY),
        description="Seconds after which PostgreSQL lets go of the store's lock of a run whose "
        "machine stopped answering (died, or cut off from the network): the lock's connection "
        "and every other of the run (a commit under way holds the lock's fence) are probed "
        "that often by TCP keepalives and given up after them, rather than after the "
        "system's two hours and more; and after which a run gives up a server whose "
        "machine stopped answering, its own end of each connection probed alike.",
    )
    stale_days: int = Field(
        default=180, ge=1,
        description="Days after an entry's verified date when its facts are flagged stale.",
    )
    releases_kept: int = Field(
        default=30, ge=1, description="Releases kept under api/releases/ (the newest N)."
    )
    changes_days: int = Field(
        default=30, ge=1, le=MAX_DAYS,
        description="Days of state changes listed in api/changes.json."
    )
    probes_kept_days: int = Field(
        default=0, ge=0, le=MAX_DAYS,
        description="Days of raw probes kept: the probes of an older day, once it is rolled up, "
        "are deleted, its daily rollups kept (0: every probe is kept).",
    )
    reports_kept_days: int = Field(
        default=90, ge=0, le=MAX_DAYS,
        description="Days the runs' summary artifacts are kept on the Prefect server: each "
        "nightly deletes the older ones (0: every one is kept).",
    )
    alert_webhook_url: str | None = Field(
        default=None,
        description="Webhook POSTed a JSON alert when a run fails or crashes or entries "
        "change state (unset: no alerts).",
    )
    alert_webhook_secret: str | None = Field(
        default="apidir-alert-webhook",
        description="Prefect Secret block holding the webhook URL, read when "
        "APIDIR_ALERT_WEBHOOK_URL is unset (empty: none).",
    )
    run_timeout: float = Field(
        default=6 * 3600, gt=0, le=7 * DAY, allow_inf_nan=False,
        description="Seconds a nightly or backfill run may take before it is failed, so a "
        "hung run never holds back the nights queued behind it.",
    )
    alert_timeout: float = Field(
        default=10.0, gt=0, le=MAX_PROBE_TIMEOUT, allow_inf_nan=False,
        description="Seconds per alert attempt.")
    stage_retries: int = Field(
        default=2, ge=0, le=MAX_TRIES,
        description="Retries of a stage that touches the network or the disk."
    )
    retry_delay: float = Field(
        default=10.0, ge=0, le=3600, allow_inf_nan=False,
        description="Seconds before a stage's first retry; doubles after."
    )

    @field_validator("output_dir", "probe_ca_file", mode="before")
    @classmethod
    def _a_named_path(cls, value: object, info: ValidationInfo) -> object:
        if isinstance(value, str) and not value.strip():  # Path("") is the working folder
            raise ValueError(f"empty: name {_NAMED_PATHS[info.field_name]}")
        return value

    @field_validator("probe_ca_file")
    @classmethod
    def _certificates_the_prober_trusts(cls, path: Path | None) -> Path | None:
        if path is not None and (problem := ca_file_problem(path)):
            raise ValueError(problem)
        return path

    @field_validator("probes_kept_days")
    @classmethod
    def _probes_kept_for_the_scores(cls, days: int) -> int:
        if 0 < days < PROBES_KEPT_MIN_DAYS:
            raise ValueError(f"0 (every probe kept) or at least {PROBES_KEPT_MIN_DAYS}: the "
                             f"scores read the raw probes of the last {PROBES_KEPT_MIN_DAYS} days")
        return days

    @field_validator("after_publish")
    @classmethod
    def _a_command_of_words(cls, command: str | None) -> str | None:
        """Told here, naming the setting, rather than once a release went live."""
        try:
            shlex.split(command or "")
        except ValueError as error:  # an unclosed quote, a lone backslash at the end
            raise ValueError(f"not a command line: {error}") from None
        return command

    @field_validator("base_url")
    @classmethod
    def _an_address_the_release_can_name(cls, base_url: str) -> str:
        """meta.source and every absolute address of a release are built from it: a value
        their rule refuses is told here, naming this setting, not as the field of the
        release's document it ends up in."""
        from pipeline.contract import absolute_uri

        return absolute_uri(base_url)

    @field_validator("database_url")
    @classmethod
    def _a_store_this_version_opens(cls, database_url: str) -> str:
        if problem := database_url_problem(database_url):
            raise ValueError(problem)
        return database_url

    @field_validator("alert_webhook_url")
    @classmethod
    def _an_address_alerts_reach(cls, url: str | None) -> str | None:
        if url and (problem := webhook_url_problem(url)):  # empty: none, as unset
            raise ValueError(problem)
        return url

    def user_agent(self, tool: str, purpose: str) -> str:
        """The User-Agent of every request the directory makes to a provider (the prober's, the
        draft's): one form, naming the directory's address, so a provider sees one identity."""
        return f"apidir-{tool}/2.0 (+{self.base_url}; {purpose})"

    def probe_settings(self) -> ProbeSettings:
        """The prober's limits, with a User-Agent naming the directory's address."""
        return ProbeSettings(
            global_concurrency=self.probe_concurrency,
            per_host_concurrency=self.probe_per_host,
            per_host_interval=self.probe_interval,
            connect_timeout=self.probe_connect_timeout,
            total_timeout=self.probe_timeout,
            max_attempts=self.probe_attempts,
            allow_private=self.probe_allow_private,
            user_agent=self.user_agent("prober", "read-only health check"),
            origin=self.probe_origin,
            ca_file=str(self.probe_ca_file) if self.probe_ca_file else None,
            confirm_failures=self.probe_confirm,
            host_failures_in_a_row=self.probe_host_failures,
            host_failure_budget=self.probe_host_budget,
        )

    @property
    def probe_origin(self) -> str:
        """The directory's own origin, sent as `Origin` to learn what a browser would be told."""
        parts = urlsplit(self.base_url)
        return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else ""

    @property
    def entries_dir(self) -> Path:
        return self.data_dir / "entries"

    @property
    def categories_file(self) -> Path:
        return self.data_dir / "categories.yaml"
