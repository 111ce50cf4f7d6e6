"""What writing a release's entry files costs the disk: each night's entry documents, pages
and Markdown written as new files into a new staging folder (and the release before last
deleted), against the same files written over the spare's (`release.files.put_file`).

    python -m bench.release_files [--entries 50000 --nights 4]

Each night writes three files an entry (17.7, 5.1 and 8.0 kB: an entry page, its Markdown
and its document at their sizes in the page benchmark), the content changed each night as
the nightly figures change it. `new` stages each night in a new folder and then deletes the
release before last, as publishes did; `spare` stages each night in the release before last
(from the third night on) and overwrites its files in place. The two ways alternate night by
night, each in a folder of its own, and the kernel's dirty pages are written out (`sync`)
before each step, so one step's writeback is not charged to the next. With `--cold` (as root)
the page cache is emptied too, as it is for a spare written two nights before. Printed per
night and step: wall, and the process's user and system CPU. Prints figures only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from pipeline.release.files import put_file

REPO = Path(__file__).resolve().parent.parent
SIZES = {"html": 17_700, "md": 5_100, "json": 8_000}


def write_new(folder: Path, names: list[str], night: int) -> None:
    """Each file created afresh in a new folder, as a staging folder was filled."""
    folder.mkdir(parents=True)
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            data = _content(name, night)
            target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666,
                             dir_fd=descriptor)
            os.write(target, data)
            os.close(target)
    finally:
        os.close(descriptor)


def write_over(folder: Path, names: list[str], night: int) -> None:
    """Each file written over the spare's of the same name (`put_file`)."""
    folder.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for name in names:
            put_file(descriptor, name, _content(name, night))
    finally:
        os.close(descriptor)


def _content(name: str, night: int) -> bytes:
    size = SIZES[name.rsplit(".", 1)[1]]
    return (f"{name} night {night} ".encode() * (size // 20 + 1))[:size]


def stage_in(spare: Path, folder: Path, names: list[str], night: int) -> None:
    """The spare made the night's staging folder, its files written over."""
    spare.rename(folder)
    write_over(folder, names, night)


COLD = False  # set by --cold: the page cache emptied before each step


def timed(step: str, work: Callable[..., object], *arguments: object) -> str:
    os.sync()
    if COLD:
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
    before, started = os.times(), time.perf_counter()
    work(*arguments)
    os.sync()  # the step's own writeback, charged to its wall
    wall, after = time.perf_counter() - started, os.times()
    return (f"{step} {wall:6.1f} s wall, {after.user - before.user:5.1f} s user, "
            f"{after.system - before.system:5.1f} s system")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--nights", type=int, default=4)
    parser.add_argument("--workdir", type=Path, default=REPO / "var" / "bench-release-files")
    parser.add_argument("--cold", action="store_true", help="empty the page cache before each "
                        "step (needs root)")
    args = parser.parse_args()
    global COLD
    COLD = args.cold
    if COLD and not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        parser.exit(2, "bench.release_files: --cold needs to write /proc/sys/vm/drop_caches "
                    "(root)\n")
    shutil.rmtree(args.workdir, ignore_errors=True)
    names = [f"entry-{n:06d}.{suffix}" for n in range(args.entries) for suffix in SIZES]
    print(f"{args.entries:,} entries, {len(names):,} files a night")
    releases: dict[str, list[Path]] = {"new": [], "spare": []}
    for night in range(1, args.nights + 1):
        for way in ("new", "spare"):
            kept = releases[way]
            folder = args.workdir / way / f"night-{night}"
            if way == "spare" and len(kept) >= 2:
                spare = kept.pop(0)  # the release before last, staged into
                line = timed("write", stage_in, spare, folder, names, night)
            else:
                line = timed("write", write_new, folder, names, night)
            kept.append(folder)
            print(f"night {night} {way:5} {line}", flush=True)
            if way == "new" and len(kept) > 2:
                gone = kept.pop(0)
                print(f"night {night} {way:5} {timed('delete', shutil.rmtree, gone)}", flush=True)
    shutil.rmtree(args.workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
