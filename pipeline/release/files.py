"""Files of a staged release written and pruned by a folder's descriptor: a reused folder's
files (a spare release's, `swap`) are overwritten in place, and those of entries gone removed;
its datasets read back a line at a time. Kept apart from the swap so the page workers load
only this."""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import stat
from collections.abc import Container, Iterator
from pathlib import Path
from typing import Any

import orjson

from pipeline.release.layout import DATASET_HEAD, DATASET_META

PAGE = mmap.PAGESIZE  # what the kernel caches a file in


def put_file(folder: int, name: str, data: bytes) -> None:
    """Write `data` as the file `name` of the folder open as the descriptor `folder`.

    A regular file of one link found there (a reused folder's: see the module) is overwritten
    in place and keeps its blocks; on this project's ext4 disk a new file cost the kernel
    60-240 µs and an overwrite 35. Its last page is written whole (the content, then zeros
    cut off after), never in part within the file: the kernel would read such a page from the
    disk first, one wait a file once the spare is no longer cached; and the file is never cut
    short of a block it keeps, which would free the block and wait on the disk. Anything
    else found there (a file linked from elsewhere, a link, a folder) is removed and a new
    file made, so no other path ever sees the write."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    size = 0
    try:
        target = os.open(name, flags, 0o666, dir_fd=folder)
    except OSError as error:  # a link (ELOOP), a folder (EISDIR), a pipe with no reader (ENXIO)
        if error.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise
        target = None
    if target is not None:
        found = os.fstat(target)
        if found.st_nlink == 1 and stat.S_ISREG(found.st_mode):
            size = found.st_size
        else:
            os.close(target)
            target = None
    if target is None:
        _remove_at(folder, name)
        target = os.open(name, flags | os.O_EXCL, 0o666, dir_fd=folder)
    try:
        padding = -len(data) % PAGE if size > len(data) - len(data) % PAGE else 0
        written = memoryview(data + bytes(padding) if padding else data)
        while written:
            written = written[os.write(target, written):]
        if size > len(data) or padding:
            os.ftruncate(target, len(data))
    finally:
        os.close(target)


def _remove_at(folder: int, name: str) -> None:
    """Remove what `name` is in the folder open as `folder` (a folder with all it holds)."""
    try:
        found = os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(found.st_mode):
        shutil.rmtree(name, dir_fd=folder)
    else:
        os.unlink(name, dir_fd=folder)


def keep_only(folder: Path, names: Container[str]) -> None:
    """Remove what `folder` holds but `names`: in a reused folder, the files of entries the
    release no longer has, before its files are checked and written."""
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for found in os.scandir(descriptor):
            if found.name not in names:
                _remove_at(descriptor, found.name)
    finally:
        os.close(descriptor)


class Folders:
    """Files under a folder, reached by a descriptor of their own folder, opened once: two
    files an entry, so the path is not walked for each and no buffered file object is made.
    Files are written in the staged release (`put_file`); the previous release's are read,
    never through a symbolic link."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.folders: dict[str, int | None] = {}

    def _folder(self, folder: str) -> int | None:
        if folder not in self.folders:
            try:
                self.folders[folder] = os.open(os.path.join(self.root, folder),
                                               os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                self.folders[folder] = None
        return self.folders[folder]

    def create(self, relative: str, data: bytes) -> None:
        """Write a file of the staged release (over the spare's file of the same entry)."""
        folder, name = os.path.split(relative)
        if (parent := self._folder(folder)) is None:
            raise FileNotFoundError(f"{self.root / folder}: no such folder")
        put_file(parent, name, data)

    def read(self, relative: str, limit: int) -> str | None:
        """The text of a regular file of at most `limit` bytes; None for anything else."""
        data = self.read_bytes(relative, limit)
        if data is None:
            return None
        try:
            return data.decode()
        except UnicodeDecodeError:
            return None

    def read_bytes(self, relative: str, limit: int) -> bytes | None:
        """The bytes of a regular file of at most `limit` bytes; None for anything else."""
        folder, name = os.path.split(relative)
        if (parent := self._folder(folder)) is None:
            return None
        try:
            source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
        except OSError:
            return None
        try:
            found = os.fstat(source)
            if not stat.S_ISREG(found.st_mode) or found.st_size > limit:
                return None
            # Read to the end in the size fstat found: a file grown since is not read, and no
            # buffer larger than the file is made (one of `limit` costs more than the read).
            # A read that stops short of what it asked, at the size fstat found, is at the
            # file's end: no further read is made to be told so.
            pieces, size, want = [], 0, found.st_size + 1
            while piece := os.read(source, want):
                pieces.append(piece)
                size += len(piece)
                if size > found.st_size:
                    return None
                if size == found.st_size and len(piece) < want:
                    break
                want = found.st_size + 1 - size
            return pieces[0] if len(pieces) == 1 else b"".join(pieces)
        except OSError:
            return None
        finally:
            os.close(source)

    def close(self) -> None:
        for descriptor in self.folders.values():
            if descriptor is not None:
                os.close(descriptor)
        self.folders.clear()

    def __enter__(self) -> Folders:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def dataset_lines(path: Path) -> Iterator[bytes]:
    """The entry lines of a staged dataset file, each without its separating comma."""
    with path.open("rb") as dataset:
        if dataset.readline() != DATASET_HEAD:
            raise ValueError(f"{path} does not start as a dataset file")
        for line in dataset:
            if line.startswith(DATASET_META):
                return
            yield line.rstrip(b"\n").removesuffix(b",")


def dataset_meta(path: Path) -> dict[str, Any]:
    """The meta of a staged dataset file: its last line, read from the end."""
    with path.open("rb") as dataset:
        dataset.seek(max(0, path.stat().st_size - (1 << 16)))
        tail = dataset.read().rsplit(b"\n" + DATASET_META, 1)[-1]
    return orjson.loads(tail.removeprefix(DATASET_META).rstrip().removesuffix(b"}"))
