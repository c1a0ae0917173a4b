"""Finishing a swap of cleaned segments that a crash interrupted.

The cleaner writes a cleaned segment as ``<base>.log.cleaned``, renames it
``<base>.log.swap`` once it is whole (the commit point), then replaces the old segments
with it. A log opened after a crash completes what was committed and drops the rest.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from samsa.protocol.batch import compute_crc
from samsa.protocol.errors import CorruptRecordError
from samsa.storage.files import (INDEX_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, fsync_dir,
                                 parse_offset_name,
                                 segment_file)
from samsa.storage.segment import scan_batches

log = logging.getLogger(__name__)


def _swap_end(path: Path, base: int) -> int | None:
    """One past the last offset of a ``.log.swap`` file (``base + 1`` if empty), or None
    if it is not wholly made of valid batches (then it was never a finished swap)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        end = base + 1
        prev = base - 1
        for _, h, buf, off in scan_batches(fd, 0, size, strict=True):
            if h.base_offset <= prev or h.base_offset < base or compute_crc(buf, off, h.size) != h.crc:
                return None
            prev = h.last_offset
            end = h.last_offset + 1
        return end
    except CorruptRecordError:
        return None
    finally:
        os.close(fd)


def complete_swaps(dir: Path) -> None:
    """Finish the swaps a crash interrupted (called when a log is opened, before its
    directory is listed): each valid ``<base>.log.swap`` replaces the segments whose base
    offsets lie in its offset range and becomes ``<base>.log``, its indexes left to be
    rebuilt. An invalid one is deleted. Other ``.cleaned``/``.swap`` files are left for
    the caller to delete."""
    suffix = LOG_SUFFIX + SWAP_SUFFIX
    swaps = sorted(off for name in os.listdir(dir) if (off := parse_offset_name(name, suffix)) is not None)
    for base in swaps:
        path = segment_file(dir, base, suffix)
        end = _swap_end(path, base)
        if end is None:
            log.warning("%s: deleting %s, which is not a complete cleaned segment", dir, path.name)
            path.unlink(missing_ok=True)
            continue
        log.info("%s: completing the swap of cleaned segment %s (offsets %d..%d)", dir, path.name, base, end - 1)
        replaced = sorted(off for name in os.listdir(dir)
                          if (off := parse_offset_name(name, LOG_SUFFIX)) is not None and base <= off < end)
        # Its aborted transactions are at most those of the segments it replaces; the log
        # rebuilds them from the cleaned segment on (its indexes are missing: it is recovered).
        aborted = b"".join(_read_or_empty(segment_file(dir, off, TXN_INDEX_SUFFIX)) for off in replaced)
        for off in replaced:
            for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
                segment_file(dir, off, s).unlink(missing_ok=True)
        if aborted:
            segment_file(dir, base, TXN_INDEX_SUFFIX).write_bytes(aborted)
        for s in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
            segment_file(dir, base, s).unlink(missing_ok=True)  # rebuilt from the log
        os.replace(path, segment_file(dir, base, LOG_SUFFIX))
        fsync_dir(dir)


def _read_or_empty(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""
