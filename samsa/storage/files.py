"""Names of the files Kafka keeps in a log directory, and small file helpers."""

from __future__ import annotations

import os
import re
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
SNAPSHOT_SUFFIX = ".snapshot"
TXN_INDEX_SUFFIX = ".txnindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"  # a cleaned segment being written (storage/cleaner.py)
SWAP_SUFFIX = ".swap"  # a cleaned segment ready to replace the old ones (storage/swap.py)
TMP_SUFFIX = ".tmp"
# Left behind by an interrupted operation (Kafka's own suffixes); removed when loading.
TEMP_SUFFIXES = (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX)

DELETE_DIR_SUFFIX = "-delete"
FUTURE_DIR_SUFFIX = "-future"
STRAY_DIR_SUFFIX = "-stray"

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"  # held by the broker using the directory (storage/dir_lock.py)
META_PROPERTIES = "meta.properties"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
_OFFSET_RE = re.compile(r"^[0-9]{20}$")


def offset_name(offset: int) -> str:
    """Kafka's file name stem for an offset: 20 digits, zero-padded."""
    return f"{offset:020d}"


def segment_file(dir: Path, base_offset: int, suffix: str) -> Path:
    return dir / (offset_name(base_offset) + suffix)


def parse_offset_name(name: str, suffix: str) -> int | None:
    """The offset in ``00000000000000000042.log`` (for ``suffix=".log"``), else None."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    return int(stem) if _OFFSET_RE.match(stem) else None


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def is_valid_topic(topic: str) -> bool:
    return bool(_TOPIC_RE.match(topic)) and topic not in (".", "..")


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """``my-topic-3`` -> ("my-topic", 3); None for anything that is not a partition dir."""
    topic, sep, part = name.rpartition("-")
    if not sep or not part.isdigit() or not is_valid_topic(topic):
        return None
    return topic, int(part)


def fsync_dir(path: Path) -> None:
    """Make a rename or a create in ``path`` durable."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems cannot fsync a directory
    finally:
        os.close(fd)


def write_atomically(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Replace ``path`` with ``data`` so a reader sees the old file or the new, never half."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)


def pwrite_all(fd: int, data, position: int) -> None:
    """os.pwrite until every byte is written (a short write is legal, if rare)."""
    n = os.pwrite(fd, data, position)
    if n == len(data):
        return
    view = memoryview(data)
    while n < len(view):
        n += os.pwrite(fd, view[n:], position + n)


class ShortFileError(OSError):
    """A file slice's file ended before its byte range did (truncated after the read)."""


class FileSlice:
    """Byte ranges of segment files, fixed when the log was read, for a fetch answer to send
    with ``sendfile`` (zero copy). Each range holds a duplicate of its segment's descriptor,
    so a segment closed, deleted or replaced by the cleaner after the read still sends the
    bytes it had; a segment truncated after the read sends fewer, which the sender must treat
    as a failed send (the length prefix already went). ``end_offset``: every offset in the
    slice is below it (for the aborted transactions of a read_committed answer).
    ``read()`` gives the bytes (for a TLS listener) and closes the descriptors, as ``close()``
    does; a dropped slice closes them too."""

    __slots__ = ("ranges", "size", "end_offset", "_at", "__weakref__")

    def __init__(self, ranges: list[tuple[int, int, int]], end_offset: int):
        self.ranges = ranges  # (fd, position, length), in order
        self.size = sum(r[2] for r in ranges)
        self.end_offset = end_offset
        self._at = (0, 0)  # (range index, bytes of it sent)

    def __len__(self) -> int:
        return self.size

    def __bool__(self) -> bool:
        return self.size > 0

    def read(self) -> bytes:
        """The bytes (the file's as they are now), then closed; ShortFileError if a file ended early."""
        try:
            parts = []
            for fd, pos, n in self.ranges:
                data = os.pread(fd, n, pos)
                while len(data) < n:
                    more = os.pread(fd, n - len(data), pos + len(data))
                    if not more:
                        raise ShortFileError(f"segment file ended {n - len(data)} bytes before the fetched range")
                    data += more
                parts.append(data)
            return parts[0] if len(parts) == 1 else b"".join(parts)
        finally:
            self.close()

    def send_now(self, sock_fd: int) -> bool:
        """``sendfile`` to a non-blocking socket as far as it takes now: True when all is sent.
        A short send means the socket is full: no second call to hear EAGAIN, the caller waits
        for the socket to have room (a file that ended early then sends 0: ShortFileError)."""
        i, done = self._at
        ranges = self.ranges
        try:
            while i < len(ranges):
                fd, pos, n = ranges[i]
                while done < n:
                    want = n - done
                    sent = os.sendfile(sock_fd, fd, pos + done, want)
                    if sent == 0:
                        raise ShortFileError(f"segment file ended {want} bytes before the fetched range")
                    done += sent
                    if sent < want:
                        self._at = (i, done)
                        return False
                i, done = i + 1, 0
        except BlockingIOError:
            self._at = (i, done)
            return False
        self._at = (i, 0)
        return True

    def remaining(self) -> list[tuple[int, int, int]]:
        """The ranges (or their rests) not sent yet."""
        i, done = self._at
        rest = self.ranges[i:]
        if rest and done:
            fd, pos, n = rest[0]
            rest[0] = (fd, pos + done, n - done)
        return rest

    def close(self) -> None:
        ranges, self.ranges = self.ranges, []
        for fd, _, _ in ranges:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self) -> None:
        self.close()
