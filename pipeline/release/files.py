"""Files of a staged release written and pruned by a folder's descriptor: a reused folder's
files (a spare release's, `swap`) are overwritten in place, and those of entries gone removed.
Kept apart from the swap so the page workers load only this."""

from __future__ import annotations

import errno
import mmap
import os
import shutil
import stat
from collections.abc import Container
from pathlib import Path

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
