"""A compacted topic written in transactions (confluent-kafka's transactional producer) as a
broker process cleans it: aborted records go, committed ones compact, and once safe the
transaction markers go too (Kafka's rule, KIP-98 and KIP-534)."""

from __future__ import annotations

import uuid
from pathlib import Path

from broker_process import BrokerProcess
from compat_helpers import WAIT, consume, create_topic, producer, wait_until, watermarks

from samsa.protocol.batch import iter_headers

TOPIC = "txn-compacted"


def _markers(partition_dir: Path) -> list[int]:
    """Offsets of the control batches in the partition's segment files."""
    out = []
    for path in sorted(partition_dir.glob("*.log")):
        out += [h.base_offset for _, h in iter_headers(path.read_bytes()) if h.is_control]
    return sorted(out)


def test_compaction_of_transactions_removes_aborted_records_then_markers(tmp_path):
    b = BrokerProcess(tmp_path, **{"log.cleaner.backoff.ms": 200}).start()
    try:
        create_topic(b.bootstrap, TOPIC, config={
            "cleanup.policy": "compact", "internal.segment.bytes": "1200", "min.cleanable.dirty.ratio": "0.01",
            "delete.retention.ms": "200"})
        p = producer(b.bootstrap, transactional_id=f"txn-{uuid.uuid4().hex[:8]}")
        p.init_transactions(WAIT)
        latest: dict[bytes, bytes] = {}
        for t in range(12):
            p.begin_transaction()
            values = {b"k%d" % k: b"t%d-%d" % (t, k) for k in range(3)}
            for key, value in values.items():
                p.produce(TOPIC, key=key, value=value, partition=0)
            if t % 3 == 1:
                p.flush(WAIT)
                p.abort_transaction(WAIT)
            else:
                p.commit_transaction(WAIT)
                latest.update(values)
        last_marker = watermarks(b.bootstrap, TOPIC)[1] - 1  # the last commit marker is the last thing written
        # plain records after the transactions, so that the segments holding them close
        filler = producer(b.bootstrap, linger_ms=0)
        for i in range(20):  # one batch each: a segment rolls only between appends
            filler.produce(TOPIC, key=b"filler", value=b"f%02d" % i + b"." * 60, partition=0)
            assert filler.flush(WAIT) == 0
        latest[b"filler"] = b"f19" + b"." * 60

        partition_dir = tmp_path / "logs" / f"{TOPIC}-0"
        # every marker goes but that of the producer's last transaction (its last batch stays, and
        # so does the marker that ends it), and the aborted transactions' index entries with them
        wait_until(lambda: _markers(partition_dir) == [last_marker], "the markers removed", 60, interval=0.3)
        assert not list(partition_dir.glob("*.txnindex"))

        for isolation in ("read_committed", "read_uncommitted"):
            recs = consume(b.bootstrap, TOPIC, isolation_level=isolation)
            assert {r.key: r.value for r in recs} == latest, isolation
            # one record a key written in transactions, the last committed: no aborted record left
            # (the filler's newest ones are in the active segment, which is never cleaned)
            assert sorted((r.key, r.value) for r in recs if r.key != b"filler") == sorted(
                (k, v) for k, v in latest.items() if k != b"filler"), isolation
    finally:
        b.stop()
