"""The zero-copy read of a log (``PartitionLog.read_slice``): the same bytes as ``read``, as
byte ranges of the segment files that outlive a roll, a retention deletion or a cleaner swap,
and that refuse to send a range a truncation shortened (a real socket pair, real files)."""

from __future__ import annotations

import os
import random
import socket

import pytest

from samsa.protocol.batch import iter_headers, validate
from samsa.protocol.records import build_batch
from samsa.storage import LogConfig, PartitionLog
from samsa.storage.files import FileSlice, ShortFileError

T0 = 1_700_000_000_000


def batch(n: int, size: int, ts: int = T0) -> bytearray:
    return bytearray(build_batch([(None, os.urandom(size), ts + i) for i in range(n)]))


def filled(tmp_path, segment_bytes: int = 20_000, index_interval: int = 4096) -> PartitionLog:
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=segment_bytes,
                                                        index_interval_bytes=index_interval))
    rnd = random.Random(7)
    for i in range(120):
        b = batch(rnd.randint(1, 5), rnd.choice([10, 100, 700, 3000]), T0 + i)
        plog.append(b, validate(b), now_ms=T0 + i)
    return plog


def as_bytes(data) -> bytes:
    return data.read() if isinstance(data, FileSlice) else bytes(data)


def test_slices_give_the_bytes_read_gives(tmp_path):
    plog = filled(tmp_path)
    assert len(plog.segments) > 5
    rnd = random.Random(11)
    leo = plog.log_end_offset
    for _ in range(400):
        offset = rnd.randrange(0, leo)
        max_bytes = rnd.choice([1, 100, 4096, 10_000, 50_000, 1 << 20])
        max_offset = rnd.choice([None, leo, rnd.randrange(offset, leo + 1)])
        first = rnd.random() < 0.7
        want = plog.read(offset, max_bytes, max_offset=max_offset, min_one_batch=first)
        got = plog.read_slice(offset, max_bytes, max_offset=max_offset, min_one_batch=first)
        end = getattr(got, "end_offset", None)
        got = as_bytes(got)
        assert got == want, (offset, max_bytes, max_offset, first)
        if end is not None and got:
            last = [h.next_offset for _, h in iter_headers(got)][-1]
            assert last <= end <= leo  # an upper bound of the slice's offsets
    plog.close()


def test_small_reads_come_inline(tmp_path):
    plog = filled(tmp_path)
    data = plog.read_slice(0, 1 << 20, inline_below=1 << 30)
    assert isinstance(data, bytes) and data == plog.read(0, 1 << 20)
    assert plog.read_slice(plog.log_end_offset, 100) == b""
    plog.close()


def test_a_slice_outlives_retention_and_roll(tmp_path):
    plog = filled(tmp_path)
    want = plog.read(0, 1 << 20)
    data = plog.read_slice(0, 1 << 20)
    assert isinstance(data, FileSlice) and len(data.ranges) > 1
    plog.delete_records_before(plog.segments[-1].base_offset)
    plog.enforce_retention(T0 + 10**9)
    plog.roll()
    assert data.read() == want  # the deleted files' bytes, held open by the slice
    plog.close()


def test_a_truncated_file_is_a_short_send_never_a_wrong_one(tmp_path):
    plog = filled(tmp_path, segment_bytes=1 << 30)
    base = plog.log_end_offset // 2
    data = plog.read_slice(0, 1 << 30)
    whole = len(data)
    plog.truncate_to(base)
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        got = bytearray()
        with pytest.raises(ShortFileError):
            while not data.send_now(a.fileno()):
                got += b.recv(1 << 20)
        b.setblocking(False)
        try:
            while chunk := b.recv(1 << 20):
                got += chunk
        except BlockingIOError:
            pass
        assert len(got) < whole
    finally:
        a.close()
        b.close()
        data.close()
    plog.close()


def test_send_now_sends_everything_in_order(tmp_path):
    plog = filled(tmp_path)
    want = plog.read(0, 1 << 20)
    data = plog.read_slice(0, 1 << 20)
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        got = bytearray()
        while not data.send_now(a.fileno()):
            rest = data.remaining()
            assert sum(r[2] for r in rest) + len(got) >= len(want) - (1 << 22)
            got += b.recv(1 << 20)
        a.close()
        while chunk := b.recv(1 << 20):
            got += chunk
        assert bytes(got) == want
    finally:
        b.close()
        data.close()
    plog.close()


def _expected(batches: list[tuple[int, int, int]], offset: int, max_bytes: int, max_offset, first: bool) -> bytes:
    """The reference cut, from a walk over every batch: (base offset, last offset, bytes)."""
    i = next((k for k, (_, last, _) in enumerate(batches) if last >= offset), None)
    if i is None or max_offset is not None and offset >= max_offset or max_offset is not None and batches[i][0] >= max_offset:
        return b""
    if len(batches[i][2]) > max_bytes:
        return batches[i][2] if first else b""
    out, size = [], 0
    for base, _, data in batches[i:]:
        if max_offset is not None and base >= max_offset or size + len(data) > max_bytes:
            break
        out.append(data)
        size += len(data)
    return b"".join(out)


def test_the_cut_after_the_last_whole_batch_with_batches_bigger_than_a_header_read(tmp_path):
    """read_range finds where the last whole batch below the limit ends from the batch headers
    alone (reading them in 16 KiB chunks and jumping over batches longer than that): the same cut
    as a walk over every batch, for batches from 100 bytes to 300 KB, any limit and any offset."""
    plog = PartitionLog.open(tmp_path / "t-0", LogConfig(segment_bytes=1 << 30, index_interval_bytes=4096))
    rnd = random.Random(5)
    for i in range(150):
        b = batch(rnd.randint(1, 3), rnd.choice([100, 1000, 9000, 20_000, 70_000, 300_000]), T0 + i)
        plog.append(b, validate(b), now_ms=T0 + i)
    # the batches as stored (base offsets assigned), walked one by one
    stored = as_bytes(plog.read_slice(0, 1 << 30))
    batches = [(h.base_offset, h.next_offset - 1, stored[pos:pos + h.size]) for pos, h in iter_headers(stored)]
    leo = plog.log_end_offset
    for _ in range(600):
        offset = rnd.randrange(0, leo)
        max_bytes = rnd.choice([1, 5000, 16_384, 16_400, 100_000, 310_000, 1 << 20, 5 << 20])
        max_offset = rnd.choice([None, None, rnd.randrange(offset, leo + 1)])
        first = rnd.random() < 0.7
        want = _expected(batches, offset, max_bytes, max_offset, first)
        got = as_bytes(plog.read_slice(offset, max_bytes, max_offset=max_offset, min_one_batch=first))
        assert got == want, (offset, max_bytes, max_offset, first)
    plog.close()
