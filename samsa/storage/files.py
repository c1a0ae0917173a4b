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
