"""A segment's offset index (``.index``) and time index (``.timeindex``).

Both are sparse, sorted, fixed-size big-endian entries, as in Kafka:

* offset index: ``int32 relative_offset, int32 position`` (8 bytes). An entry says the
  batch whose last offset is ``base + relative_offset`` starts at ``position``.
* time index: ``int64 timestamp, int32 relative_offset`` (12 bytes). An entry says no
  record at or before ``base + relative_offset``'s batch end has a timestamp above
  ``timestamp``; timestamps strictly increase from entry to entry.

The entries live in memory in two native arrays (binary search with :mod:`bisect`
without a Python object per entry). The file is written lazily: appends only touch
memory, :meth:`flush` writes what is new. Unlike Kafka's, files are never preallocated,
so nothing has to be trimmed. A closed segment's index is read from disk only when it is
first needed.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from bisect import bisect_left, bisect_right
from pathlib import Path

from samsa.storage.files import pwrite_all

_BIG_ENDIAN = sys.byteorder == "big"


class IndexCorruptError(Exception):
    """The index file cannot be trusted; the segment rebuilds it from the log."""


class _Index:
    ENTRY_SIZE: int
    KEY_TYPE: str
    VALUE_TYPE: str
    _STRUCT: struct.Struct

    __slots__ = ("path", "base_offset", "max_entries", "_keys", "_values", "_persisted", "_file_entries", "_loaded", "_synced")

    def __init__(self, path: Path, base_offset: int, max_bytes: int, *, new: bool = False):
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(max_bytes // self.ENTRY_SIZE, 1)
        self._keys = array(self.KEY_TYPE)
        self._values = array(self.VALUE_TYPE)
        self._persisted = 0  # leading entries known to be on disk, unchanged
        self._file_entries = 0  # entries the file holds
        self._loaded = new
        self._synced = not new  # False while the file may differ from what was fsynced
        if new:
            self._reset_file()

    # ------------------------------------------------------------------ loading

    def check_file(self) -> int:
        """Cheap sanity check without loading: entry count; raise IndexCorruptError."""
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            raise IndexCorruptError(f"{self.path} is missing") from None
        if size % self.ENTRY_SIZE:
            raise IndexCorruptError(f"{self.path} has size {size}, not a multiple of {self.ENTRY_SIZE}")
        return size // self.ENTRY_SIZE

    def read_file_entries(self, which: tuple[int, ...]) -> list[tuple[int, int]]:
        """Distinct entries at the given indexes (negative = from the end), in file order."""
        n = self.check_file()
        positions = sorted({j for j in (i + n if i < 0 else i for i in which) if 0 <= j < n})
        out = []
        with open(self.path, "rb") as f:
            for i in positions:
                f.seek(i * self.ENTRY_SIZE)
                out.append(self._STRUCT.unpack(f.read(self.ENTRY_SIZE)))
        return out

    def _ensure_loaded(self) -> None:
        if self._loaded:
            return
        n = self.check_file()
        data = self.path.read_bytes()[: n * self.ENTRY_SIZE]
        self._keys, self._values = self._decode(data)
        self._persisted = self._file_entries = n
        self._loaded = True

    def _decode(self, data: bytes) -> tuple[array, array]:
        keys, values = array(self.KEY_TYPE), array(self.VALUE_TYPE)
        for k, v in self._STRUCT.iter_unpack(data):
            keys.append(k)
            values.append(v)
        return keys, values

    def _encode(self, start: int) -> bytes:
        pack = self._STRUCT.pack
        keys, values = self._keys, self._values
        return b"".join(pack(keys[i], values[i]) for i in range(start, len(keys)))

    # ------------------------------------------------------------------ state

    @property
    def loaded(self) -> bool:
        """Whether the entries are in memory (a closed segment's are read on first use)."""
        return self._loaded

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return self._loaded and len(self._keys) >= self.max_entries

    @property
    def size_bytes(self) -> int:
        return len(self) * self.ENTRY_SIZE

    def reset(self, keys: array | None = None, values: array | None = None) -> None:
        """Replace every entry (after a rebuild); the file is rewritten on flush."""
        self._keys = keys if keys is not None else array(self.KEY_TYPE)
        self._values = values if values is not None else array(self.VALUE_TYPE)
        self._persisted = 0
        self._loaded = True
        self._synced = False

    def _truncate_entries(self, n: int) -> None:
        del self._keys[n:]
        del self._values[n:]
        self._persisted = min(self._persisted, n)
        self._synced = False

    # ------------------------------------------------------------------ persistence

    def _reset_file(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.close(fd)
        self._file_entries = 0

    def flush(self, *, fsync: bool = True) -> None:
        """Write entries not yet on disk; drop entries removed since the last flush."""
        if not self._loaded:
            return
        n = len(self._keys)
        if self._persisted == n and self._file_entries == n and (self._synced or not fsync):
            return
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            if self._persisted < n:
                pwrite_all(fd, self._encode(self._persisted), self._persisted * self.ENTRY_SIZE)
            if self._file_entries != n:
                os.ftruncate(fd, n * self.ENTRY_SIZE)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        wrote = self._persisted < n or self._file_entries != n
        self._persisted = self._file_entries = n
        self._synced = fsync or (self._synced and not wrote)

    def unlink(self) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass


class OffsetIndex(_Index):
    ENTRY_SIZE = 8
    KEY_TYPE = "i"  # relative offset
    VALUE_TYPE = "i"  # position
    _STRUCT = struct.Struct(">ii")
    __slots__ = ()

    def _decode(self, data: bytes) -> tuple[array, array]:
        both = array("i")
        both.frombytes(data)
        if not _BIG_ENDIAN:
            both.byteswap()
        return both[0::2], both[1::2]

    def append(self, offset: int, position: int) -> None:
        """Add an entry; the caller keeps offsets and positions increasing."""
        self._ensure_loaded()
        self._keys.append(offset - self.base_offset)
        self._values.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= ``offset``, else (base, 0)."""
        self._ensure_loaded()
        i = bisect_right(self._keys, offset - self.base_offset) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def lookup_position(self, position: int) -> tuple[int, int]:
        """(offset, position) of the last entry with position <= ``position``, else (base, 0)."""
        self._ensure_loaded()
        i = bisect_right(self._values, position) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[i], self._values[i]

    def last_entry(self) -> tuple[int, int] | None:
        self._ensure_loaded()
        if not self._keys:
            return None
        return self.base_offset + self._keys[-1], self._values[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        self._ensure_loaded()
        self._truncate_entries(bisect_left(self._keys, offset - self.base_offset))

    def check_against(self, log_size: int) -> None:
        """Kafka-like sanity check from the file alone (first and last entries)."""
        entries = self.read_file_entries((0, -2, -1))
        if not entries:
            return
        rel = [e[0] for e in entries]
        pos = [e[1] for e in entries]
        if rel[0] < 0 or pos[0] < 0 or rel != sorted(rel) or pos != sorted(pos):
            raise IndexCorruptError(f"{self.path}: entries are not increasing")
        if len(entries) > 1 and (rel[-1] == rel[-2] or pos[-1] == pos[-2]):
            raise IndexCorruptError(f"{self.path}: repeated entries")
        if pos[-1] >= log_size:
            raise IndexCorruptError(f"{self.path}: last entry points past the end of the log")


class TimeIndex(_Index):
    ENTRY_SIZE = 12
    KEY_TYPE = "q"  # timestamp
    VALUE_TYPE = "i"  # relative offset
    _STRUCT = struct.Struct(">qi")
    __slots__ = ()

    def maybe_append(self, timestamp: int, offset: int) -> bool:
        """Add ``(timestamp, offset)`` if the timestamp is above the last entry's."""
        self._ensure_loaded()
        keys = self._keys
        if timestamp < 0 or (keys and timestamp <= keys[-1]):
            return False
        rel = offset - self.base_offset
        if self._values and rel < self._values[-1]:
            return False  # keep offsets monotonic too
        keys.append(timestamp)
        self._values.append(rel)
        return True

    def lookup_before(self, timestamp: int) -> int:
        """Offset of the last entry with a timestamp strictly below ``timestamp``, else base.

        No record at or before that offset's batch has a timestamp >= ``timestamp``."""
        self._ensure_loaded()
        i = bisect_left(self._keys, timestamp) - 1
        return self.base_offset if i < 0 else self.base_offset + self._values[i]

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        self._ensure_loaded()
        if not self._keys:
            return None
        return self._keys[-1], self.base_offset + self._values[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Remove entries for offsets >= ``offset``."""
        self._ensure_loaded()
        self._truncate_entries(bisect_left(self._values, offset - self.base_offset))

    def check_against(self, next_offset: int | None = None) -> None:
        entries = self.read_file_entries((0, -2, -1))
        if not entries:
            return
        ts = [e[0] for e in entries]
        rel = [e[1] for e in entries]
        if rel[0] < 0 or rel != sorted(rel) or ts != sorted(ts):
            raise IndexCorruptError(f"{self.path}: entries are not increasing")
        if len(entries) > 1 and ts[-1] == ts[-2]:
            raise IndexCorruptError(f"{self.path}: repeated timestamps")
        if next_offset is not None and self.base_offset + rel[-1] >= next_offset:
            raise IndexCorruptError(f"{self.path}: last entry is past the end of the log")
