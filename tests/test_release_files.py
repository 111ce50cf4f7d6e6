"""Files of a staged release written over a reused folder's (`release.files`): the content is
exactly what was written whatever the file held before, the file keeps its inode, and
anything but a regular file of one link is replaced, never written through."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.release.files import PAGE, keep_only, put_file

SIZES = [0, 1, PAGE - 1, PAGE, PAGE + 1, 2 * PAGE - 100, 2 * PAGE, 5 * PAGE + 7]


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[tuple[Path, int]]:
    descriptor = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    yield tmp_path, descriptor
    os.close(descriptor)


@pytest.mark.parametrize("before", SIZES)
def test_a_file_written_over_holds_exactly_the_new_content(
    folder: tuple[Path, int], before: int
) -> None:
    path, descriptor = folder
    old = path / "entry.html"
    for after in SIZES:
        old.write_bytes(b"o" * before)
        inode = old.stat().st_ino
        data = bytes(n % 251 + 1 for n in range(after))  # no zero byte: padding would show
        put_file(descriptor, "entry.html", data)
        assert old.read_bytes() == data, (before, after)
        assert old.stat().st_ino == inode


def test_a_new_file_is_made_where_there_is_none(folder: tuple[Path, int]) -> None:
    path, descriptor = folder
    put_file(descriptor, "new.md", b"# new\n")
    assert (path / "new.md").read_bytes() == b"# new\n"


def test_what_is_not_a_file_of_one_link_is_replaced_never_written_through(
    folder: tuple[Path, int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    path, descriptor = folder
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    outside = elsewhere / "outside.html"
    outside.write_text("not the release's")
    (path / "linked.html").symlink_to(outside)
    shared = elsewhere / "shared.json"
    shared.write_text("another release's")
    os.link(shared, path / "shared.json")
    (path / "folder.md").mkdir()
    (path / "folder.md" / "inside").write_text("x")
    os.mkfifo(path / "pipe.html")  # opening it to write would wait for a reader
    for name in ("linked.html", "shared.json", "folder.md", "pipe.html"):
        put_file(descriptor, name, b"the release's")
        assert (path / name).is_file() and not (path / name).is_symlink()
        assert (path / name).read_bytes() == b"the release's"
        assert (path / name).stat().st_nlink == 1
    assert outside.read_text() == "not the release's"
    assert shared.read_text() == "another release's"


def test_keep_only_removes_the_files_and_folders_of_entries_gone(tmp_path: Path) -> None:
    for name in ("kept.html", "gone.html", "gone.md"):
        (tmp_path / name).write_text(name)
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray" / "inside.html").write_text("x")
    keep_only(tmp_path, {"kept.html", "kept.md"})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.html"]
