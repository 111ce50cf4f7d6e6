"""Valid entries on their way to the store, in the form the store takes, kept on disk until the
whole catalogue is read: a duplicate id or an unknown successor found late withdraws an entry
read early, and the parsed entries of a catalogue of 100,000 new files do not fit a run's
memory (about 3 GB), while a few thousand at a time do.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, NamedTuple

from pipeline.catalogue.entries import EntryFile
from pipeline.store.tables import content_hash, endpoint_key

CHUNK = 2000  # entries stored at once: a few MB of content, a few statements of many rows


class StoredEntry(NamedTuple):
    """An entry as the ingest stores it: its row's values, and its endpoints as (method, path,
    description, position), the first of each `endpoint_key` in listed order."""

    id: str
    category: str
    name: str
    content: dict[str, Any]
    digest: str
    source: Path
    endpoints: tuple[tuple[str, str, str | None, int], ...]
    successor: str | None = None  # deprecated.successor
    former_ids: tuple[str, ...] = ()  # formerIds, as listed

    @classmethod
    def of(cls, source: Path, entry: EntryFile) -> StoredEntry:
        content = entry.content()
        endpoints: dict[tuple[str, str], tuple[str, str, str | None, int]] = {}
        for position, endpoint in enumerate(entry.endpoints or []):
            key = endpoint_key(endpoint.method, endpoint.path)
            endpoints.setdefault(key, (*key, endpoint.description, position))
        return cls(
            entry.id,
            entry.category,
            entry.name,
            content,
            content_hash(content),
            source,
            tuple(endpoints.values()),
            entry.deprecated.successor if entry.deprecated else None,
            tuple(entry.former_ids or ()),
        )


class EntrySpool:
    """The stored forms of entries, added as they are read and read back a chunk at a time,
    in the order added, from `file` (binary, read and written)."""

    def __init__(self, file: IO[bytes], chunk: int) -> None:
        self.chunk = chunk
        self._file = file
        self._pending: list[StoredEntry] = []

    def keep(self, source: Path, entry: EntryFile) -> None:
        """Add the entry read from `source` (the `keep` of `read_catalog`)."""
        self._pending.append(StoredEntry.of(source, entry))
        if len(self._pending) >= self.chunk:
            self._write()

    def _write(self) -> None:
        if self._pending:
            self._file.seek(0, os.SEEK_END)
            pickle.dump(self._pending, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self._pending = []

    def chunks(self, withdrawn: Collection[Path] = ()) -> Iterator[list[StoredEntry]]:
        """Every entry added, but those read from a `withdrawn` file, a chunk at a time."""
        self._write()
        self._file.seek(0)
        while True:
            try:
                chunk = pickle.load(self._file)
            except EOFError:
                return
            yield [entry for entry in chunk if entry.source not in withdrawn]


@contextmanager
def entry_spool(chunk: int | None = None) -> Iterator[EntrySpool]:
    """A spool of `chunk` entries a chunk (default `CHUNK`) in a temporary file, gone when
    the block ends."""
    with tempfile.TemporaryFile(prefix="apidir-entries-") as file:
        yield EntrySpool(file, chunk or CHUNK)
