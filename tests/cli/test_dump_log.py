"""``samsa dump-log`` (kafka-dump-log.sh) on segments written by the broker and by hand."""

from __future__ import annotations

import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from samsa.protocol import group_records
from samsa.embedded import Broker
from samsa.protocol.records import build_batch

TS = 1700000000000


def dump(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samsa.cli.main", "dump-log", *args], capture_output=True,
                          text=True, timeout=60)


def crc_and_size(batch: bytes) -> tuple[int, int]:
    return struct.unpack_from(">I", batch, 17)[0], len(batch)


def batch_prefix(base: int, last: int, count: int, *, seq: tuple[int, int] = (-1, -1), pid: int = -1,
                 epoch: int = -1, leader_epoch: int = -1, txn: bool = False, control: bool = False) -> str:
    return (f"baseOffset: {base} lastOffset: {last} count: {count} baseSequence: {seq[0]} lastSequence: {seq[1]} "
            f"producerId: {pid} producerEpoch: {epoch} partitionLeaderEpoch: {leader_epoch} "
            f"isTransactional: {str(txn).lower()} isControl: {str(control).lower()} deleteHorizonMs: OptionalLong.empty")


# ---------------------------------------------------------------------------- a hand-made segment

@pytest.fixture
def segment(tmp_path: Path) -> tuple[Path, list[bytes]]:
    batches = [
        build_batch([(None, b"hello", TS), (b"k", b"v", TS + 1, [("h", b"1"), ("h2", None)])], base_offset=0),
        build_batch([(b"a", b"1", TS + 5), (b"b", b"", TS + 4)], base_offset=2, producer_id=7, producer_epoch=1,
                    base_sequence=5),
        build_batch([(struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 3), TS + 6)], base_offset=4, producer_id=7,
                    producer_epoch=1, is_transactional=True, is_control=True),
        build_batch([(b"z", b"zipped" * 20, TS + 7)], base_offset=5, compression="gzip"),
    ]
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path, batches


def test_shallow(segment):
    path, batches = segment
    r = dump("--files", str(path))
    assert r.returncode == 0 and r.stderr == ""
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"Dumping {path}", "Log starting offset: 0"]
    positions = [0]
    for b in batches:
        positions.append(positions[-1] + len(b))
    expected = [
        (batch_prefix(0, 1, 2), TS + 1, "none"),
        (batch_prefix(2, 3, 2, seq=(5, 6), pid=7, epoch=1), TS + 5, "none"),
        (batch_prefix(4, 4, 1, pid=7, epoch=1, txn=True, control=True), TS + 6, "none"),
        (batch_prefix(5, 5, 1), TS + 7, "gzip"),
    ]
    assert len(lines) == 2 + len(batches)
    for line, (prefix, max_ts, codec), batch, pos in zip(lines[2:], expected, batches, positions):
        crc, size = crc_and_size(batch)
        assert line == (f"{prefix} position: {pos} CreateTime: {max_ts} size: {size} magic: 2 "
                        f"compresscodec: {codec} crc: {crc} isvalid: true")


def test_print_data_log(segment):
    path, _ = segment
    r = dump("--files", str(path), "--print-data-log")
    assert r.returncode == 0 and r.stderr == ""
    records = [line for line in r.stdout.splitlines() if line.startswith("|")]
    assert records == [
        f"| offset: 0 CreateTime: {TS} keySize: -1 valueSize: 5 sequence: -1 headerKeys: [] payload: hello",
        f"| offset: 1 CreateTime: {TS + 1} keySize: 1 valueSize: 1 sequence: -1 headerKeys: [h,h2] key: k payload: v",
        f"| offset: 2 CreateTime: {TS + 5} keySize: 1 valueSize: 1 sequence: 5 headerKeys: [] key: a payload: 1",
        f"| offset: 3 CreateTime: {TS + 4} keySize: 1 valueSize: 0 sequence: 6 headerKeys: [] key: b payload: ",
        f"| offset: 4 CreateTime: {TS + 6} keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 3",
        f"| offset: 5 CreateTime: {TS + 7} keySize: 1 valueSize: 120 sequence: -1 headerKeys: [] key: z payload: "
        + "zipped" * 20,
    ]


def test_deep_iteration_without_data(segment):
    path, _ = segment
    r = dump("--files", str(path), "--deep-iteration")
    records = [line for line in r.stdout.splitlines() if line.startswith("|")]
    assert records[0] == f"| offset: 0 CreateTime: {TS} keySize: -1 valueSize: 5 sequence: -1 headerKeys: []"
    assert len(records) == 6


def test_skip_record_metadata(segment):
    path, _ = segment
    r = dump("--files", str(path), "--print-data-log", "--skip-record-metadata")
    lines = r.stdout.splitlines()
    assert " payload: hello" in lines
    assert "| key: k payload: v" in lines


def test_corrupt_batch_and_trailing_bytes(segment):
    path, batches = segment
    data = bytearray(path.read_bytes())
    data[len(batches[0]) - 1] ^= 0xFF  # last byte of the first batch: under its CRC
    path.write_bytes(bytes(data) + b"\x00" * 7)
    r = dump("--files", str(path))
    lines = r.stdout.splitlines()
    assert lines[2].endswith("isvalid: false")
    assert lines[3].endswith("isvalid: true")
    assert lines[-1] == f"Found 7 invalid bytes at the end of {path.name}"


def test_max_bytes(segment):
    path, batches = segment
    r = dump("--files", str(path), "--max-bytes", str(len(batches[0]) + len(batches[1])))
    assert [line.split(" lastOffset")[0] for line in r.stdout.splitlines()[2:]] == ["baseOffset: 0", "baseOffset: 2"]


def test_offsets_decoder(tmp_path):
    value = group_records.offset_value(group_records.OffsetAndMetadata(42, 3, "meta", TS))
    batch = build_batch([(group_records.offset_key("g1", "t", 0), value, TS),
                         (group_records.offset_key("g1", "t", 1), None, TS)])
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(batch)
    r = dump("--files", str(path), "--offsets-decoder")
    records = [line for line in r.stdout.splitlines() if line.startswith("|")]
    assert records[0].endswith(' key: {"type":"1","data":{"group":"g1","topic":"t","partition":0}} payload: '
                               '{"version":"3","data":{"offset":42,"leaderEpoch":3,"metadata":"meta",'
                               f'"commitTimestamp":{TS}}}}}')
    assert records[1].endswith(' key: {"type":"1","data":{"group":"g1","topic":"t","partition":1}} payload: <DELETE>')


def test_hand_made_indexes(segment):
    path, batches = segment
    base = path.parent
    index = base / "00000000000000000000.index"
    index.write_bytes(struct.pack(">ii", 3, len(batches[0])) + struct.pack(">ii", 4, len(batches[0])))
    timeindex = base / "00000000000000000000.timeindex"
    timeindex.write_bytes(struct.pack(">qi", TS + 5, 3) + struct.pack(">qi", TS + 1, 4))
    r = dump("--files", f"{index},{timeindex}")
    assert r.stdout.splitlines() == [
        f"Dumping {index}",
        f"offset: 3 position: {len(batches[0])}",
        f"offset: 4 position: {len(batches[0])}",
        f"Dumping {timeindex}",
        f"timestamp: {TS + 5} offset: 3",
        f"timestamp: {TS + 1} offset: 4",
    ]
    # The second offset-index entry points at a batch ending at 3; the second time-index entry
    # is out of order and does not match the batch's timestamp.
    assert r.stderr.splitlines() == [
        f"Mismatches in :{index.resolve()}",
        "  Index offset: 4, log offset: 3",
        f"Found timestamp mismatch in :{timeindex.resolve()}",
        f"  Index timestamp: {TS + 1}, log timestamp: {TS + 6}",
        f"Found out of order timestamp in :{timeindex.resolve()}",
        f"  Index timestamp: {TS + 1}, Previously indexed timestamp: {TS + 5}",
    ]
    r = dump("--files", str(index), "--verify-index-only")
    assert r.stdout.splitlines() == [f"Dumping {index}"]
    r = dump("--files", str(index), "--index-sanity-check")
    assert r.stdout.splitlines() == [f"Dumping {index}", f"{index} passed sanity check."]


def test_empty_index(tmp_path):
    index = tmp_path / "00000000000000000000.index"
    index.write_bytes(b"")
    assert dump("--files", str(index)).stdout.splitlines() == [f"Dumping {index}", f"{index} is empty."]


def test_errors(tmp_path):
    r = dump("--print-data-log")
    assert (r.returncode, r.stderr.strip()) == (1, 'Missing required argument "[files]"')
    missing = tmp_path / "00000000000000000000.log"
    r = dump("--files", str(missing))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [f"Cannot read {missing}: No such file or directory"]
    other = tmp_path / "notes.txt"
    other.write_text("x")
    r = dump("--files", str(other))
    assert (r.returncode, r.stderr.strip()) == (0, f"Ignoring unknown file {other}")


# ---------------------------------------------------------------------------- segments the broker wrote

def test_segment_written_by_the_broker(tmp_path):
    data_dir = tmp_path / "data"
    with Broker({"log.dirs": str(data_dir), "log.index.interval.bytes": "1"}) as broker:
        producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "log_level": 0})
        for i in range(3):
            producer.produce("dumped", key=None if i == 0 else f"k{i}".encode(), value=f"hello{i}".encode(),
                             timestamp=TS + 10 * i, headers=[("h", b"x")] if i == 2 else None)
            producer.flush(30)
        idempotent = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True,
                               "log_level": 0})
        idempotent.produce("dumped", value=b"once", timestamp=TS + 100)
        idempotent.flush(30)
    # The broker is stopped: its indexes are on disk.
    part = data_dir / "dumped-0"
    log, index, timeindex = (part / f"00000000000000000000{s}" for s in (".log", ".index", ".timeindex"))
    r = dump("--files", f"{log},{index},{timeindex}", "--print-data-log")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[:2] == [f"Dumping {log}", "Log starting offset: 0"]
    batch_re = re.compile(
        r"baseOffset: (\d+) lastOffset: (\d+) count: 1 baseSequence: (-?\d+) lastSequence: (-?\d+) "
        r"producerId: (-?\d+) producerEpoch: (-?\d+) partitionLeaderEpoch: 0 isTransactional: false "
        r"isControl: false deleteHorizonMs: OptionalLong.empty position: (\d+) CreateTime: (\d+) size: (\d+) "
        r"magic: 2 compresscodec: none crc: \d+ isvalid: true$")
    batches = [batch_re.match(line) for line in lines if line.startswith("baseOffset")]
    assert all(batches) and len(batches) == 4
    positions = [int(m.group(7)) for m in batches]
    assert positions[0] == 0
    assert all(positions[i + 1] == positions[i] + int(batches[i].group(9)) for i in range(3))
    assert [int(m.group(8)) for m in batches] == [TS, TS + 10, TS + 20, TS + 100]
    assert [(m.group(3), m.group(5)) for m in batches[:3]] == [("-1", "-1")] * 3
    assert batches[3].group(3) == "0" and int(batches[3].group(5)) >= 0  # idempotent: sequence 0, a producer id
    records = [line for line in lines if line.startswith("|")]
    assert records == [
        f"| offset: 0 CreateTime: {TS} keySize: -1 valueSize: 6 sequence: -1 headerKeys: [] payload: hello0",
        f"| offset: 1 CreateTime: {TS + 10} keySize: 2 valueSize: 6 sequence: -1 headerKeys: [] key: k1 payload: hello1",
        f"| offset: 2 CreateTime: {TS + 20} keySize: 2 valueSize: 6 sequence: -1 headerKeys: [h] key: k2 payload: hello2",
        f"| offset: 3 CreateTime: {TS + 100} keySize: -1 valueSize: 4 sequence: 0 headerKeys: [] payload: once",
    ]
    # log.index.interval.bytes=1: every batch after the first is indexed, at its position.
    at = lines.index(f"Dumping {index}")
    assert lines[at + 1:at + 4] == [f"offset: {i} position: {positions[i]}" for i in (1, 2, 3)]
    at = lines.index(f"Dumping {timeindex}")
    assert lines[at + 1:] == [f"timestamp: {TS + 10} offset: 1", f"timestamp: {TS + 20} offset: 2",
                              f"timestamp: {TS + 100} offset: 3"]
