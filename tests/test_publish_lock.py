"""One publisher at a time: publishers started together in separate processes (the publish
stage and the bare `apidir publish` command) each publish a complete release under a version
of its own; a staging folder is removed only when its owner is provably dead."""

from __future__ import annotations

import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlmodel import Session, select

from pipeline.catalogue.entries import load_categories
from pipeline.release.layout import (
    CATEGORY_INDEX,
    FULL_DATASET,
    RELEASE_INDEX,
    category_file,
    release_folder,
)
from pipeline.release.publish import build_release
from pipeline.release.swap import (
    PublishLockTimeout,
    lock_file,
    new_staging_folder,
    owner_is_dead,
    publish_lock,
    side_folders,
    staging_folders,
    write_release,
)
from pipeline.release.validate import validate_release
from pipeline.store.locks import LockFileRefused
from pipeline.store.tables import ReleaseRow, make_engine
from tests.conftest import REPO, WriteEntry, make_entry, unusable_lock_file

PROCESSES = 4
RELEASES_EACH = 4


def publish_repeatedly(env: dict[str, str], times: int, start: multiprocessing.Barrier) -> None:
    """A publisher process: the publish stage the flows and `apidir publish` run, `times` times."""
    os.environ.update(env)
    from pipeline.operations.stages import publish_now, score_entries_now
    from pipeline.settings import Settings
    from pipeline.store.tables import utcnow

    settings = Settings()
    start.wait(timeout=120)
    for _ in range(times):
        now = utcnow()
        publish_now(settings, score_entries_now(settings, now), now)


@pytest.fixture
def published_store(write_entry: WriteEntry, tmp_path: Path, data_dir: Path) -> dict[str, str]:
    for number, category in enumerate(("weather", "maps", "ai", "payments", "weather")):
        write_entry(make_entry(id=f"entry-{number}", category=category))
    env = {
        "APIDIR_DATA_DIR": str(data_dir),
        "APIDIR_DATABASE_URL": f"sqlite:///{tmp_path / 'var' / 'apidir.db'}",
        "APIDIR_OUTPUT_DIR": str(tmp_path / "public"),
        "APIDIR_BASE_URL": "https://directory.test",
        "APIDIR_RELEASES_KEPT": "100",
    }
    from pipeline.catalogue.entries import read_catalog
    from pipeline.catalogue.ingest import ingest_catalog

    engine = make_engine(env["APIDIR_DATABASE_URL"])
    with Session(engine) as session:
        ingest_catalog(session, read_catalog([data_dir / "entries"], data_dir / "entries"))
    engine.dispose()
    return env


def check_every_release(env: dict[str, str], expected: int) -> list[str]:
    """Every release the store recorded is listed, kept complete, and has a version alone."""
    output = Path(env["APIDIR_OUTPUT_DIR"])
    categories = load_categories(Path(env["APIDIR_DATA_DIR"]) / "categories.yaml")
    assert validate_release(output, categories) == []
    engine = make_engine(env["APIDIR_DATABASE_URL"])
    with Session(engine) as session:
        stored = list(session.exec(select(ReleaseRow.version)))
    engine.dispose()
    listed = [r["version"] for r in json.loads((output / RELEASE_INDEX).read_text())["releases"]]
    assert len(stored) == expected
    assert sorted(listed) == sorted(stored)
    assert len(set(listed)) == len(listed)
    for version in listed:
        folder = output / release_folder(version)
        full = json.loads((folder / "apis.json").read_text())
        assert full["meta"]["version"] == version
        assert full["meta"]["totalAPIs"] == len(full["apis"]) == 5
        for category in categories:
            relative = category_file(category.id).removeprefix("api/")
            part = json.loads((folder / relative).read_text())
            assert part["meta"]["version"] == version
    assert staging_folders(output) == []
    return listed


def test_publishers_in_many_processes_each_publish_a_whole_release_of_their_own(
    published_store: dict[str, str],
) -> None:
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(PROCESSES)
    publishers = [
        context.Process(target=publish_repeatedly, args=(published_store, RELEASES_EACH, start))
        for _ in range(PROCESSES)
    ]
    for process in publishers:
        process.start()
    for process in publishers:
        process.join(timeout=300)
    assert [process.exitcode for process in publishers] == [0] * PROCESSES
    versions = check_every_release(published_store, PROCESSES * RELEASES_EACH)
    # each UTC day's releases are numbered from 1 without a gap: one day's, or two where
    # midnight passed while they published
    sequences: dict[str, list[int]] = {}
    for version in versions:
        day, sequence = version.rsplit("+", 1)[1].split(".")
        sequences.setdefault(day, []).append(int(sequence))
    assert {day: sorted(numbers) for day, numbers in sequences.items()} == {
        day: list(range(1, len(numbers) + 1)) for day, numbers in sequences.items()}


def test_bare_publish_commands_started_together_wait_for_each_other(
    published_store: dict[str, str],
) -> None:
    env = {**os.environ, **published_store}
    commands = [
        subprocess.Popen([sys.executable, "-m", "pipeline.cli", "publish"], cwd=REPO, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [command.communicate(timeout=300) for command in commands]
    assert [command.returncode for command in commands] == [0, 0, 0], outputs
    check_every_release(published_store, 3)


def test_a_publisher_gives_up_after_its_wait_with_one_clear_line(tmp_path: Path) -> None:
    output = tmp_path / "public"
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom pathlib import Path\nfrom pipeline.release.swap import "
         "publish_lock\nwith publish_lock(Path(sys.argv[1])):\n    print('held', flush=True)\n"
         "    time.sleep(60)\n", str(output)],
        cwd=REPO, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        started = time.monotonic()
        with pytest.raises(PublishLockTimeout, match="another publisher has held"), \
                publish_lock(output, timeout=0.5):
            pass
        assert time.monotonic() - started >= 0.5
    finally:
        holder.kill()
        holder.wait()
    with publish_lock(output, timeout=5):  # the kernel let go when its holder died
        assert lock_file(output).exists()


def test_only_a_provably_dead_owners_staging_folder_is_removed(
    published_store: dict[str, str],
) -> None:
    output = Path(published_store["APIDIR_OUTPUT_DIR"]).absolute()
    output.parent.mkdir(parents=True, exist_ok=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
    dead_pid = int(finished.stdout)
    host = socket.gethostname()
    live = output.with_name(f".{output.name}.staging-{sleeper.pid}@{host}-0000aaaa")
    dead = output.with_name(f".{output.name}.staging-{dead_pid}@{host}-0000bbbb")
    elsewhere = output.with_name(f".{output.name}.staging-{dead_pid}@another-host-0000cccc")
    unnamed = output.with_name(f".{output.name}.staging-0000dddd")  # from before owners
    # Retired releases whose removal was cut short: removed alike, by their owner's fate.
    retired_live = output.with_name(f".{output.name}.retired-{sleeper.pid}@{host}-0000eeee")
    retired_dead = output.with_name(f".{output.name}.retired-{dead_pid}@{host}-0000ffff")
    old = output.with_name(f".{output.name}.old-0000abcd")  # from before owners
    try:
        for folder in (live, dead, elsewhere, unnamed, retired_live, retired_dead, old):
            folder.mkdir()
            (folder / "half-written.json").write_text("{")
        assert not owner_is_dead(new_staging_folder(output))  # this process's own
        env = {**os.environ, **published_store}
        subprocess.run([sys.executable, "-m", "pipeline.cli", "publish"], cwd=REPO, env=env,
                       check=True, capture_output=True)
        assert staging_folders(output) == sorted([live, elsewhere])
        assert side_folders(output, "retired") == [retired_live]
        assert side_folders(output, "old") == []
        assert json.loads((output / FULL_DATASET).read_text())["meta"]["totalAPIs"] == 5
        assert (output / CATEGORY_INDEX).is_file()
    finally:
        sleeper.kill()
        sleeper.wait()


def test_the_retired_release_is_kept_as_the_spare_once_the_lock_is_let_go(
    tmp_path: Path,
) -> None:
    """The swap renames the release it replaces out of sight; once the outermost holder lets go
    of the lock, the newest one is kept as the spare (the next publish stages into it) and the
    others, an older spare among them, are deleted (a minute for a large release on a slow
    disk), not while others wait for the lock."""
    categories = load_categories(REPO / "data" / "categories.yaml")
    output = tmp_path / "public"
    now = datetime(2026, 11, 24, 2, 0, tzinfo=UTC)

    def release(version: str) -> dict[str, bytes]:
        return build_release([], categories, version, now, "https://directory.test")

    def removed() -> None:
        for thread in threading.enumerate():
            if thread.name == "apidir-remove-retired":
                thread.join(timeout=60)

    with publish_lock(output):
        write_release(output, release("2026.11.24"), categories)
        write_release(output, release("2026.11.24-1"), categories)
        write_release(output, release("2026.11.24-2"), categories)
        retired = side_folders(output, "retired")
        assert sorted(map(version_of, retired)) == ["2026.11.24", "2026.11.24-1"]
        assert side_folders(output, "spare") == []  # still there: the lock is held
    removed()
    assert side_folders(output, "retired") == []
    assert [version_of(spare) for spare in side_folders(output, "spare")] == ["2026.11.24-1"]
    with publish_lock(output):
        write_release(output, release("2026.11.24-3"), categories)
    removed()
    assert [version_of(spare) for spare in side_folders(output, "spare")] == ["2026.11.24-2"]
    assert version_of(output) == "2026.11.24-3"


def test_with_the_spare_off_the_release_replaced_is_deleted_an_earlier_spare_too(
    published_store: dict[str, str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`APIDIR_PUBLISH_SPARE=false`, for a disk that holds one release and not two: the
    release a publish replaces is deleted once the lock is let go rather than kept for the
    next publish to write over, and a spare kept by publishes before the setting is deleted
    too. Every release is still whole."""
    from pipeline.operations.stages import publish_now, score_entries_now
    from pipeline.settings import Settings
    from pipeline.store.tables import utcnow

    for name, value in published_store.items():
        monkeypatch.setenv(name, value)
    output = Path(published_store["APIDIR_OUTPUT_DIR"])

    def publish() -> None:
        settings, now = Settings(), utcnow()
        publish_now(settings, score_entries_now(settings, now), now)
        for thread in threading.enumerate():
            if thread.name == "apidir-remove-retired":
                thread.join(timeout=60)

    publish()
    publish()
    assert len(side_folders(output, "spare")) == 1  # the default keeps the one replaced
    monkeypatch.setenv("APIDIR_PUBLISH_SPARE", "false")
    publish()
    assert side_folders(output, "spare") == [] and side_folders(output, "retired") == []
    publish()
    assert side_folders(output, "spare") == [] and side_folders(output, "retired") == []
    check_every_release(published_store, 4)


def version_of(release: Path) -> str:
    return json.loads((release / FULL_DATASET).read_bytes())["meta"]["version"]


HOLD_THEN_PUBLISH = """\
import sys
from datetime import UTC, datetime
from pathlib import Path

from pipeline.catalogue.entries import load_categories
from pipeline.release.publish import build_release
from pipeline.release.swap import publish_lock, write_release

output, categories = Path(sys.argv[1]), load_categories(Path(sys.argv[2]))
release = build_release([], categories, sys.argv[3], datetime(2026, 11, 24, 2, tzinfo=UTC),
                        "https://directory.test")
with publish_lock(output):
    print("held", flush=True)
    sys.stdin.readline()
    try:
        write_release(output, release, categories)
    except Exception as error:
        print(f"{type(error).__name__}: {error}", flush=True)
    else:
        print("swapped", flush=True)
"""


def test_a_publisher_whose_lock_file_was_removed_does_not_swap_over_the_next_one(
    tmp_path: Path,
) -> None:
    """The lock file removed while a publisher holds it (by hand, by a cleaner of old files):
    the next publisher makes a new one and publishes; the first, let go on, stops before its
    swap in one line, and the release of the second stays live."""
    categories_file = REPO / "data" / "categories.yaml"
    categories = load_categories(categories_file)
    output = tmp_path / "public"
    first = subprocess.Popen(
        [sys.executable, "-c", HOLD_THEN_PUBLISH, str(output), str(categories_file),
         "2.0.0+20261124.1"],
        cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        lock_file(output).unlink()
        second = build_release([], categories, "2.0.0+20261124.2",
                               datetime(2026, 11, 24, 2, 1, tzinfo=UTC), "https://directory.test")
        write_release(output, second, categories)
        first.stdin.write("go on\n")
        first.stdin.flush()
        said = first.stdout.readline().strip()
    finally:
        first.kill()
        first.wait()
    assert said.startswith(f"PublishLockLost: the publish lock {lock_file(output)} was removed")
    assert "the live release is unchanged" in said
    assert version_of(output) == "2.0.0+20261124.2"
    assert staging_folders(output) == []


@pytest.mark.parametrize("kind", ["link", "dangling link", "folder", "fifo", "second name"])
def test_a_publish_lock_file_that_is_no_plain_file_of_its_own_is_refused_and_left_alone(
    published_store: dict[str, str], tmp_path: Path, kind: str,
) -> None:
    """The publish lock's file opens by the store lock's rule: through a link it would make a
    file elsewhere (a dangling link's target) and lock it, and two names of one file are two
    locks on it. `apidir publish` refuses in one line naming the file, nothing published,
    and what the link names is left as it was."""
    output = Path(published_store["APIDIR_OUTPUT_DIR"])
    path = lock_file(output)
    elsewhere = tmp_path / "elsewhere.txt"
    if kind != "dangling link":
        elsewhere.write_text("kept\n")
    unusable_lock_file(path, kind, elsewhere)
    with pytest.raises(LockFileRefused) as refused, publish_lock(output, timeout=1):
        pass
    assert str(refused.value) == (
        f"{path} is not a plain file of the publish lock (a link, a folder or a device, or a "
        "file linked elsewhere): remove it and run again")
    if kind == "link":
        done = subprocess.run([sys.executable, "-m", "pipeline.cli", "publish"], cwd=REPO,
                              env={**os.environ, **published_store}, capture_output=True,
                              text=True, timeout=300)
        assert (done.returncode, done.stderr.splitlines()[-1:]) == (
            2, [f"apidir: {refused.value}"]), done.stderr
        assert "Traceback" not in done.stderr
    assert not output.exists()
    if kind == "dangling link":
        assert not elsewhere.exists()
    elif kind != "folder":
        assert elsewhere.read_text() == "kept\n"
