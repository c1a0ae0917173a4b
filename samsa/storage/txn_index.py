"""The aborted-transaction index of a segment: ``<base offset>.txnindex``, Kafka's layout.

One 34-byte entry per transaction aborted by a marker in the segment, in marker order::

    version int16 (0) | producer_id int64 | first_offset int64 | last_offset int64 |
    last_stable_offset int64

``first_offset`` is the transaction's first record (it may lie in an earlier segment),
``last_offset`` its abort marker, ``last_stable_offset`` the LSO once it was aborted: a
search for the aborted transactions of a fetch range stops at the first entry whose LSO is
past the range. The file exists only once a segment has an entry; it is rebuilt from the
log after an unclean shutdown (see ``PartitionLog``), so it is fsynced only with the segment.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import NamedTuple

from samsa.storage.files import fsync_dir

ENTRY = struct.Struct(">hqqqq")
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    __slots__ = ("path", "_entries", "_dirty")

    def __init__(self, path: Path):
        self.path = path
        self._entries: list[AbortedTxn] | None = None  # read on first use
        self._dirty = False

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = self._read()
        return self._entries

    def _read(self) -> list[AbortedTxn]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        out = []
        for i in range(0, len(data) - len(data) % ENTRY.size, ENTRY.size):
            version, *fields = ENTRY.unpack_from(data, i)
            if version != VERSION:
                break  # a torn or foreign tail: the rest is rebuilt from the log
            out.append(AbortedTxn(*fields))
        return out

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and txn.last_offset <= entries[-1].last_offset:
            raise ValueError(f"{self.path}: aborted transaction at {txn.last_offset} does not follow "
                             f"{entries[-1].last_offset}")
        entries.append(txn)
        with open(self.path, "ab") as f:
            f.write(ENTRY.pack(VERSION, *txn))
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries of markers at or after ``offset``."""
        entries = self.entries
        keep = [e for e in entries if e.last_offset < offset]
        if len(keep) != len(entries):
            self.reset(keep)

    def reset(self, entries: list[AbortedTxn]) -> None:
        """Rewrite the file with ``entries`` (no file when there are none)."""
        self._entries = list(entries)
        if not entries:
            self.path.unlink(missing_ok=True)
            return
        self.path.write_bytes(b"".join(ENTRY.pack(VERSION, *e) for e in entries))
        self._dirty = True

    def collect(self, fetch_offset: int, upper_bound: int, out: list[AbortedTxn]) -> bool:
        """Add to ``out`` the transactions overlapping [fetch_offset, upper_bound); True when
        no later segment can hold one (an entry's LSO reached ``upper_bound``)."""
        for e in self.entries:
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound:
                out.append(e)
            if e.last_stable_offset >= upper_bound:
                return True
        return False

    def flush(self) -> None:
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            self._dirty = False
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(self.path.parent)
        self._dirty = False

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries = []
        self._dirty = False

    def rename_to(self, path: Path) -> None:
        if self.path.exists():
            os.replace(self.path, path)
        self.path = path
