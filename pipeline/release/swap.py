"""Staging beside the live folder and the atomic swap: a release is written into a fresh
staging folder, validated, and exchanged with the live folder in one rename, so a failed
validation or a crash leaves the previous release as it was.

One publisher at a time: every path that writes a release holds `publish_lock`, an exclusive
lock on a file beside the output folder (released by the kernel when its holder dies; opened as
the store's lock files are, never through a link); a publisher whose lock file was removed
meanwhile stops before its swap (`check_lock_held`). Each
staging folder names its owner (process id and host), so a publisher removes only the
leftovers of owners that are provably dead, never a folder another run is still writing.

The release a swap retires is kept as the spare (`.<output>.spare-…`) until the next publish,
which stages into it: the folders named `reuse` (one file per entry, never hard-linked
elsewhere) keep their files, each overwritten in place (`files.put_file`), which costs the
kernel a fraction of a new file; everything else of the spare is moved aside and deleted
once the lock is let go. A publish that keeps no spare (`keep_spare`) deletes the release it
retires instead, and stages into a new folder.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pipeline.catalogue.entries import Category
from pipeline.processes import process_gone
from pipeline.release.after_publish import run_after_publish
from pipeline.release.hosting import (
    HEADERS_FILE,
    redirect_files,
    release_header_rules,
    renamed_ids,
    render_headers_file,
)
from pipeline.release.layout import CATEGORY_INDEX, FULL_DATASET, Completion
from pipeline.release.validate import ReleaseValidationError, dataset_problems, validate_release
from pipeline.settings import Settings
from pipeline.store.locks import LockFileLost, check_held, take_lock_file


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one atomic rename (Linux renameat2); False where unsupported."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(first), at_fdcwd, os.fsencode(second), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EPERM):
        return False
    raise OSError(code, os.strerror(code), str(second))


def _swap_in(staging: Path, output_dir: Path, keep_spare: bool = True) -> None:
    """Make `staging` the live folder; the release it replaces is renamed out of sight and,
    once the publish lock is let go, kept as the spare (`keep_spare`) or removed
    (`_remove_retired`), not while others wait for it."""
    if not output_dir.exists():
        staging.rename(output_dir)
        return
    retired = new_side_folder(output_dir, "retired")
    if _exchange(staging, output_dir):
        staging.rename(retired)
    else:
        output_dir.rename(retired)
        staging.rename(output_dir)
    _RETIRED.setdefault(lock_file(output_dir), []).append((output_dir, retired, keep_spare))


# `.<output>.<staging|retired|spare>-<pid>@<host>-<random>`; older releases wrote
# `.<output>.staging-<random>` and `.<output>.old-<random>`.
_OWNER = re.compile(r"\.(?:staging|retired|spare)-(?P<pid>\d+)@(?P<host>.+)-[0-9a-f]{8}$")
# Retired releases waiting for their publisher to let go of the lock, by lock file, each with
# its output folder and whether it may be kept as the spare.
_RETIRED: dict[Path, list[tuple[Path, Path, bool]]] = {}
# What a publish moved aside to delete with the retired releases (`_clear_for_reuse`).
_DISCARDED: dict[Path, list[Path]] = {}
# Folders a thread of this process is removing: never reused meanwhile.
_REMOVING: set[Path] = set()


def _remove_retired(lock: Path) -> None:
    """Keep the newest release this process retired under `lock` as its output folder's spare
    (the next publish stages into it) unless its publish keeps none, and remove the others,
    any older spare of this process and what its publishes moved aside (`_clear_for_reuse`)
    in a thread of their own (a release of 100,000 entries takes a minute to delete on a slow
    disk, and nothing reads it); the interpreter waits for it before it exits, and one cut
    short is finished by the next publisher."""
    retired, removed = _RETIRED.pop(lock, []), _DISCARDED.pop(lock, [])
    if retired:
        *older, (output_dir, newest, keep_spare) = retired
        removed += [folder for _, folder, _ in older]
        removed += [folder for folder in side_folders(output_dir, "spare")
                    if _owned_here(folder) and folder not in _REMOVING]
        if keep_spare:
            newest.rename(new_side_folder(output_dir, "spare"))
        else:
            removed.append(newest)
    if not removed:
        return
    _REMOVING.update(removed)

    def remove() -> None:
        for folder in removed:
            shutil.rmtree(folder, ignore_errors=True)
            _REMOVING.discard(folder)

    threading.Thread(target=remove, name="apidir-remove-retired").start()


class PublishLockTimeout(RuntimeError):
    """Another publisher held the output folder's lock for longer than the wait allowed."""


class PublishLockLost(LockFileLost):
    """The publish lock file left its path while this publisher held it: another publisher
    may hold the new one, so this one stops before its swap."""


class UnsafeOutputFolder(ValueError):
    """The output folder is a place a release must never replace: the file system's root, or
    a folder holding files but no release (the swap would move them aside, then delete them)."""


class PublishWriteFailed(RuntimeError):
    """The system refused a publish's write (a full or read-only disk, a folder without
    permission): told as one line naming where, and whether the live release changed."""


def live_release(output_dir: Path) -> tuple[int, int] | None:
    """Which folder is the live release (its device and inode, through any symbolic link):
    a publish swaps a new folder in, so it changes exactly when a release went live."""
    try:
        found = output_dir.stat()
    except OSError:
        return None
    return found.st_dev, found.st_ino


@contextmanager
def write_failures_told(output_dir: Path) -> Iterator[None]:
    """An OSError the system raised while publishing to `output_dir` raised again as
    PublishWriteFailed, in the words of `publish_failure_line`: the error's own ("[Errno 28]
    No space left on device") name no path where a write failed. One raised with a line of
    its own (no errno: the output folder is a file) keeps it."""
    before = live_release(output_dir)
    try:
        yield
    except OSError as error:
        if error.errno is None:
            raise
        unchanged = live_release(output_dir) == before
        raise PublishWriteFailed(publish_failure_line(error, output_dir, unchanged)) from error


def publish_failure_line(error: OSError, output_dir: Path, unchanged: bool) -> str:
    """The one line for `error` met while publishing to `output_dir`: the file it names, or
    the folder the new release is staged in (beside the live one, on the same disk)."""
    why = error.strerror or " ".join(str(error).split()) or type(error).__name__
    named = os.fsdecode(error.filename) if error.filename is not None else ""
    if os.path.isabs(named):
        where = f"{why}: {named}"
    else:  # a write names no file; a file opened in its folder names itself alone
        staged = Path(os.path.realpath(output_dir)).parent
        where = f"{why} {f'writing {named} ' if named else ''}in {staged}/, where the new " \
                "release is staged"
    live = ("the live release is unchanged" if unchanged
            else "the new release went live before the error")
    return f"publishing to {output_dir} failed: {where}; {live}"


def live_folder(output_dir: Path) -> Path:
    """Where the output folder really is, every symlink on its way followed: the swap renames
    that folder (a link to it stays a link to the live release), and every publisher, however
    it names the folder, takes the same lock."""
    folder = Path(os.path.realpath(output_dir))
    if not folder.name:
        raise UnsafeOutputFolder(f"output folder {output_dir} is the file system's root; "
                                 "refusing to publish over it")
    return folder


def check_replaceable(output_dir: Path) -> None:
    """A release may replace only a release, or a folder that is empty or missing: one
    holding other files (a typo in APIDIR_OUTPUT_DIR, an empty one meaning the working folder)
    is refused before anything is moved."""
    if output_dir.exists() and not output_dir.is_dir():  # never swap a file of its own aside
        raise NotADirectoryError(f"output folder {output_dir} is a file, not a folder; "
                                 "refusing to publish over it")
    if (output_dir.is_dir() and not (output_dir / CATEGORY_INDEX).is_file()
            and any(output_dir.iterdir())):
        raise UnsafeOutputFolder(
            f"output folder {output_dir} holds files but no release (no {CATEGORY_INDEX}); "
            "refusing to replace it: set APIDIR_OUTPUT_DIR to a new or empty folder")


def lock_file(output_dir: Path) -> Path:
    output_dir = live_folder(output_dir)
    return output_dir.with_name(f".{output_dir.name}.publish.lock")


@dataclass
class _Hold:
    """The open lock file a thread holds, and how many nested `publish_lock`s hold it."""

    fd: int
    depth: int = 0


# The publish locks held in this process, by lock file and thread: a thread re-enters its own,
# another thread of the process waits for it as another process does.
_HOLDS: dict[tuple[Path, int], _Hold] = {}
LOCK_POLL_SECONDS = 0.05


def _wait_for_lock(path: Path, timeout: float | None) -> int:
    """The lock file at `path`, locked once its holder lets go; PublishLockTimeout after
    `timeout` seconds (None: no limit)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while (fd := take_lock_file(path, "the publish lock")) is None:
        if deadline is not None and time.monotonic() >= deadline:
            raise PublishLockTimeout(
                f"another publisher has held {path} for more than {timeout:g} s; "
                "try again when it has finished")
        time.sleep(LOCK_POLL_SECONDS)
    return fd


@contextmanager
def publish_lock(output_dir: Path, timeout: float | None = None) -> Iterator[None]:
    """Hold the output folder's publish lock (waiting at most `timeout` seconds, None: for
    ever). Re-entrant within a thread, so a publishing path may nest the paths it calls."""
    path = lock_file(output_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = (path, threading.get_ident())
    hold = _HOLDS.get(key)
    if hold is None:
        hold = _HOLDS[key] = _Hold(_wait_for_lock(path, timeout))
    hold.depth += 1
    try:
        yield
    finally:
        hold.depth -= 1
        if hold.depth == 0:  # the outermost hold ended: nobody waits on what is removed
            del _HOLDS[key]
            os.close(hold.fd)
            _remove_retired(path)


def check_lock_held(output_dir: Path) -> None:
    """Raise PublishLockLost unless this thread holds the output folder's publish lock on the
    file still at its path: once the file is removed (by hand, a cleaner of old files), the
    next publisher makes a new one and locks that, and a swap now could replace its release."""
    path = lock_file(output_dir)
    hold = _HOLDS.get((path, threading.get_ident()))
    check_held(None if hold is None else hold.fd, path, lambda: PublishLockLost(
        f"the publish lock {path} was removed or replaced while this publish held it, so "
        "another publisher may have published meanwhile: this release was not swapped in "
        "and the live release is unchanged; publish again"))


def staging_folders(output_dir: Path) -> list[Path]:
    return side_folders(output_dir, "staging")


def side_folders(output_dir: Path, kind: str) -> list[Path]:
    """The `kind` folders (staging, retired) beside `output_dir`."""
    output_dir = live_folder(output_dir)
    return sorted(output_dir.parent.glob(f".{output_dir.name}.{kind}-*"))


def owner_is_dead(folder: Path) -> bool:
    """True when a staging or retired folder's owner provably runs no more: a process of this
    host that is gone, or a folder from before owners were named (whose publisher held no
    lock and cannot still be running once this one holds it)."""
    match = _OWNER.search(folder.name)
    if match is None:
        return True
    return process_gone(match["host"], int(match["pid"]))


def _owned_here(folder: Path) -> bool:
    """True when a side folder was made by this process."""
    match = _OWNER.search(folder.name)
    return (match is not None and match["host"] == socket.gethostname()
            and int(match["pid"]) == os.getpid())


def new_staging_folder(output_dir: Path) -> Path:
    """A fresh staging folder beside `output_dir`, named after this process and host."""
    return new_side_folder(output_dir, "staging")


def new_side_folder(output_dir: Path, kind: str) -> Path:
    owner = f"{os.getpid()}@{socket.gethostname()}"
    return output_dir.with_name(f".{output_dir.name}.{kind}-{owner}-{uuid.uuid4().hex[:8]}")


def write_file(folder: Path, relative: str, data: bytes) -> None:
    target = folder / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)


def _clear_for_reuse(staging: Path, reuse: Collection[str], aside: Path) -> None:
    """Move everything of a spare made a staging folder but the folders `reuse` (relative to
    it) and what they hold into the folder `aside`, as it lies: deleting its large files would
    keep the publish waiting on the disk, so they are deleted with the retired releases."""
    kept = {PurePosixPath(relative) for relative in reuse}
    on_the_way = {parent for relative in kept for parent in relative.parents} - {PurePosixPath()}

    def clear(folder: Path, relative: PurePosixPath) -> None:
        for found in os.scandir(folder):
            path = relative / found.name
            if found.is_dir(follow_symlinks=False) and path in kept:
                continue
            if found.is_dir(follow_symlinks=False) and path in on_the_way:
                clear(Path(found.path), path)
            else:
                (aside / path).parent.mkdir(parents=True, exist_ok=True)
                os.rename(found.path, aside / path)

    clear(staging, PurePosixPath())


def link_tree(source: Path, target: Path, skip: Callable[[Path], bool] = lambda _: False) -> None:
    """Hard-link the files under `source` into `target` (copies where links fail), but those
    whose path relative to `source` is `skip`ped. Safe because published files are never
    rewritten in place, only replaced by the swap: a reused folder's are, but only those of one
    link (`put_file`)."""
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source)
        if path.is_dir() or skip(relative):
            continue
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, destination)
        except OSError:
            shutil.copy2(path, destination)


def stage_and_swap(
    output_dir: Path,
    categories: list[Category],
    write: Callable[[Path], None],
    carry: Iterable[str] = (),
    reuse: Collection[str] = (),
    keep_spare: bool = True,
    before_swap: Callable[[], None] = lambda: None,
    entries_checked: bool = False,
) -> Path:
    """`write` the release into a staging folder with the `carry` folders of the live release
    and the `_headers` of what it then holds, validate it, swap it in as live. The staging
    folder is the spare where there is one and `reuse` names folders whose files `write`
    overwrites in place (`put_file`), removing those it does not write (`keep_only`);
    otherwise a new one. Without `keep_spare`, the release swapped out is deleted rather than
    kept as the next spare. `before_swap` runs once the release is valid, just before the
    swap: what fails there leaves the live release as it is (the publish's record of the
    release, which must not be refused after the swap). Once the release is live, the
    operator's after-publish command runs (`after_publish`), still under the lock.
    `entries_checked`: `write` checked each entry as it wrote it (`validate.entry_faults`),
    so the validation does not check them again."""
    output_dir = live_folder(output_dir)
    check_replaceable(output_dir)
    output_dir.parent.mkdir(parents=True, exist_ok=True)
    with publish_lock(output_dir):
        live = _stage_and_swap_locked(output_dir, categories, write, carry, reuse, keep_spare,
                                      before_swap, entries_checked)
        run_after_publish(live, Settings().after_publish or "")  # under the lock: one at a time
        return live


def _stage_and_swap_locked(
    output_dir: Path,
    categories: list[Category],
    write: Callable[[Path], None],
    carry: Iterable[str],
    reuse: Collection[str],
    keep_spare: bool,
    before_swap: Callable[[], None],
    entries_checked: bool,
) -> Path:
    spares = [folder for folder in side_folders(output_dir, "spare")
              if folder not in _REMOVING and (owner_is_dead(folder) or _owned_here(folder))]
    spare = spares.pop() if spares and reuse else None
    leftovers = [*staging_folders(output_dir), *side_folders(output_dir, "retired"),
                 *side_folders(output_dir, "old"), *spares]
    for stale in leftovers:
        if stale not in _REMOVING and (owner_is_dead(stale) or stale in spares):
            shutil.rmtree(stale, ignore_errors=True)
    staging = new_staging_folder(output_dir)
    try:
        if spare is None:
            staging.mkdir()
        else:
            spare.rename(staging)
            aside = new_side_folder(output_dir, "retired")
            _DISCARDED.setdefault(lock_file(output_dir), []).append(aside)
            _clear_for_reuse(staging, reuse, aside)
        write(staging)
        for relative in carry:
            if (output_dir / relative).is_dir() and not (staging / relative).exists():
                link_tree(output_dir / relative, staging / relative)
        # Last: its immutable rules name the kept folders and assets the release now holds.
        write_file(staging, HEADERS_FILE, render_headers_file(release_header_rules(staging)))
        problems = validate_release(staging, categories, entries_checked)
        if problems:
            raise ReleaseValidationError(problems)
        check_lock_held(output_dir)
        before_swap()
        check_lock_held(output_dir)  # also after `before_swap`'s wait, if it waited
        _swap_in(staging, output_dir, keep_spare)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return output_dir


def complete_staged(complete: Completion, staging: Path, meta: Mapping[str, Any],
                    counts: Mapping[str, int], categories: list[Category]) -> None:
    """`complete` a release whose datasets are staged (its history, its pages). The pages
    trust the contract's values (a state they have no label for stops them); where they fail
    on datasets that break the contract, the contract's problems are the error, naming the
    entry and the field, rather than the pages'."""
    try:
        complete(staging, meta, counts)
    except Exception as error:
        problems = dataset_problems(staging, categories)
        if problems:
            raise ReleaseValidationError(problems) from error
        raise


def stage_redirects(staging: Path, renamed: Mapping[str, str]) -> None:
    """`_redirects` and `_renamed.map` of the release staged whole at `staging` (its pages
    drawn, if it has them): each former id of `renamed` (former id to the id now holding it)
    redirected to each file it holds of that id, its document, page and Markdown. Every path
    that writes a release ends with this, so all of them redirect alike."""
    for relative, data in redirect_files(
            renamed, lambda path: (staging / path).is_file()).items():
        write_file(staging, relative, data)


def dataset_renames(dataset: bytes) -> dict[str, str]:
    """The former ids the entries of a full dataset (`api/apis.json`) list, each to its
    entry's id (`hosting.renamed_ids`)."""
    apis = json.loads(dataset)["apis"]
    return renamed_ids([(api["id"], api.get("formerIds") or ()) for api in apis],
                       {api["id"] for api in apis})


def write_release(
    output_dir: Path,
    files: Mapping[str, bytes],
    categories: list[Category],
    complete: Completion | None = None,
    carry: Iterable[str] = (),
    keep_spare: bool = True,
) -> Path:
    """Stage `files`, validate them, then swap them in as the live release at `output_dir`
    (`stage_and_swap`); the former ids of renamed entries redirect to what the release holds
    once `complete` has drawn its pages (`stage_redirects`), as a published release's do."""

    def write(staging: Path) -> None:
        for relative, data in files.items():
            write_file(staging, relative, data)
        if complete is not None:
            index = json.loads(files[CATEGORY_INDEX])
            counts = {c["id"]: c["count"] for c in index["categories"]}
            complete_staged(complete, staging, index["meta"], counts, categories)
            if FULL_DATASET in files:
                stage_redirects(staging, dataset_renames(files[FULL_DATASET]))

    return stage_and_swap(output_dir, categories, write, carry, keep_spare=keep_spare)

