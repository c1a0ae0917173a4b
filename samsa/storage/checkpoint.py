"""Kafka's text checkpoint files: a version line, a count line, then one entry a line.

Used for ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and
``replication-offset-checkpoint`` (entries ``topic partition offset``) and for a
partition's ``leader-epoch-checkpoint`` (entries ``epoch start_offset``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

from samsa.storage.files import write_atomically

VERSION = 0


class CheckpointError(ValueError):
    """A checkpoint file that cannot be parsed."""


def write_lines(path: Path, entries: Iterable[str], *, fsync: bool = True) -> None:
    entries = list(entries)
    text = f"{VERSION}\n{len(entries)}\n" + "".join(e + "\n" for e in entries)
    write_atomically(path, text.encode(), fsync=fsync)


def read_lines(path: Path, fields: int) -> list[list[str]]:
    """The entries of ``path`` split into ``fields`` words; [] if the file is missing."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    lines = text.splitlines()
    if len(lines) < 2 or lines[0].strip() != str(VERSION):
        raise CheckpointError(f"{path}: unsupported version or truncated header")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"{path}: bad entry count {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count or any(len(e) != fields for e in entries):
        raise CheckpointError(f"{path}: expected {count} entries of {fields} fields")
    return entries


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int], *, fsync: bool = True) -> None:
    write_lines(path, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())), fsync=fsync)


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    try:
        return {(t, int(p)): int(o) for t, p, o in read_lines(path, 3)}
    except ValueError as e:
        raise CheckpointError(f"{path}: {e}") from None
