"""Crash and restart: what the broker acknowledged survives SIGKILL, exactly once, in order.

A confluent-kafka producer (acks=all, idempotence on) or kcat -P keeps producing while the
broker is SIGKILLed (or SIGTERMed) and restarted on the same data dir and port. Afterwards
every acknowledged record is in the log once, at the offset its acknowledgement gave, the
offsets have no gap, and the next produce lands at the old log end.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource

from samsa.protocol.records import build_batch

from compat_helpers import (BASE_TS, WAIT, BrokerProcess, admin, consume, consumer, create_topic, produce_values,
                            raw_call, start, wait_until, watermarks)

PARTITIONS = 3
RECONNECT = {"reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 250, "retry.backoff.ms": 20,
             "retry.backoff.max.ms": 250, "message.timeout.ms": 120000, "socket.connection.setup.timeout.ms": 5000}


@pytest.fixture
def crash_broker(tmp_path):
    b = BrokerProcess(tmp_path / "broker")
    yield b
    b.kill()


class Load(threading.Thread):
    """Produce ``n`` records (values ``%06d``, round-robin over the partitions), keeping at most
    ``window`` unacknowledged, recording every delivery report. Once ``at`` records are
    acknowledged, the producing thread itself calls ``action`` (say, SIGKILL the broker), so
    that it happens mid-load, with records in flight, however fast the load runs."""

    def __init__(self, bootstrap: str, topic: str, n: int, window: int = 300, at: int | None = None,
                 action=None):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.n, self.window = bootstrap, topic, n, window
        self.at, self.action = at, action
        self.fired = threading.Event()
        self.produced_when_fired = self.acked_when_fired = -1
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[tuple[bytes, object]] = []
        self.remaining = None
        self.error: BaseException | None = None

    def _dr(self, err, msg):
        if err is None:
            self.acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            self.failed.append((msg.value(), err))

    def run(self):
        try:
            p = Producer({"bootstrap.servers": self.bootstrap, "enable.idempotence": True, "acks": "all",
                          "linger.ms": 2, "batch.num.messages": 50, **RECONNECT})
            deadline = time.monotonic() + 240
            for i in range(self.n):
                while i - len(self.acked) - len(self.failed) > self.window and time.monotonic() < deadline:
                    p.poll(0.05)
                p.produce(self.topic, value=b"%06d" % i, partition=i % PARTITIONS, on_delivery=self._dr)
                p.poll(0)
                if self.action is not None and not self.fired.is_set() and len(self.acked) >= self.at:
                    self.produced_when_fired, self.acked_when_fired = i + 1, len(self.acked)
                    self.action()
                    self.fired.set()
            self.remaining = p.flush(180)
        except BaseException as e:  # reported by the test
            self.error = e

    def finish(self):
        self.join(240)
        assert not self.is_alive(), "the producer never finished"
        assert self.error is None, self.error
        assert self.remaining == 0, f"{self.remaining} records never got a delivery report"


def verify(bootstrap: str, topic: str, acked: list, produced: set[bytes] | None = None) -> dict[int, int]:
    """Every acknowledged record where its acknowledgement said, each value once, no offset gaps,
    each partition in the order produced; returns each partition's log end offset."""
    logs = {p: consume(bootstrap, topic, p, timeout=60) for p in range(PARTITIONS)}
    ends = {}
    seen: set[bytes] = set()
    for p, recs in logs.items():
        assert [r.offset for r in recs] == list(range(len(recs))), f"offset gap in partition {p}"
        values = [r.value for r in recs]
        assert len(set(values)) == len(values), f"duplicates in partition {p}"
        assert values == sorted(values), f"partition {p} is out of the produced order"
        seen.update(values)
        ends[p] = len(recs)
    for p, offset, value in acked:
        assert offset < len(logs[p]) and logs[p][offset].value == value, \
            f"acknowledged {value!r} at {p}/{offset} is not there"
    if produced is not None:
        assert seen <= produced, "records nobody produced"
    return ends


def assert_produce_continues(bootstrap: str, topic: str, ends: dict[int, int]) -> None:
    for p, end in ends.items():
        assert produce_values(bootstrap, topic, [b"next-%d" % p], partition=p, acks="all",
                              **{"enable.idempotence": True}) == [(p, end)]
        (last,) = consume(bootstrap, topic, p, start=end)
        assert last.value == b"next-%d" % p


@pytest.mark.parametrize("how,segment_bytes", [("kill", None), ("term", None), ("kill", 4096)],
                         ids=["kill", "term", "kill-small-segments"])
def test_restart_during_produce_load(crash_broker, topic_name, how, segment_bytes):
    b = start(crash_broker)
    create_topic(b.bootstrap, topic_name, partitions=PARTITIONS,
                 config={"internal.segment.bytes": str(segment_bytes)} if segment_bytes else None)
    n = 4000
    load = Load(b.bootstrap, topic_name, n, at=n // 3, action=b.kill if how == "kill" else b.stop)
    load.start()
    wait_until(lambda: load.fired.is_set() or not load.is_alive(), timeout=120, what="the broker going down")
    assert load.fired.is_set(), load.error
    assert load.produced_when_fired < n
    start(b)
    load.finish()
    # with idempotence and a long message timeout, nothing is lost: everything gets acknowledged
    assert not load.failed, load.failed[:5]
    assert len(load.acked) == n
    ends = verify(b.bootstrap, topic_name, load.acked, {b"%06d" % i for i in range(n)})
    assert sum(ends.values()) == n, "every record exactly once"
    assert_produce_continues(b.bootstrap, topic_name, ends)


def test_clean_restart_keeps_everything(crash_broker, topic_name):
    b = start(crash_broker)
    create_topic(b.bootstrap, topic_name, partitions=PARTITIONS, config={"internal.segment.bytes": "20000"})
    load = Load(b.bootstrap, topic_name, 2000)
    load.start()
    load.finish()
    assert not load.failed
    b.stop()
    assert b.proc.returncode == 0, f"SIGTERM is a clean shutdown, exit code 0:\n{b.log_text()[-3000:]}"
    start(b)
    ends = verify(b.bootstrap, topic_name, load.acked, {b"%06d" % i for i in range(2000)})
    assert sum(ends.values()) == 2000
    assert_produce_continues(b.bootstrap, topic_name, ends)
    # and once more, with a crash this time, on top of the segments rolled above
    b.kill()
    start(b)
    ends2 = verify(b.bootstrap, topic_name, load.acked)
    assert ends2 == {p: e + 1 for p, e in ends.items()}
    assert_produce_continues(b.bootstrap, topic_name, ends2)


def test_topics_and_configs_survive_a_crash(crash_broker, topic_name):
    b = start(crash_broker)
    create_topic(b.bootstrap, topic_name, partitions=2, config={"retention.ms": "7777777"})
    produce_values(b.bootstrap, topic_name, [b"a", b"b"], partition=1)
    b.kill()
    start(b)
    c = consumer(b.bootstrap)
    try:
        md = c.list_topics(topic_name, timeout=WAIT)
        assert sorted(md.topics[topic_name].partitions) == [0, 1]
        assert c.get_watermark_offsets(TopicPartition(topic_name, 1), timeout=WAIT, cached=False) == (0, 2)
    finally:
        c.close()
    a = admin(b.bootstrap)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    assert a.describe_configs([res])[res].result(WAIT)["retention.ms"].value == "7777777"


def test_idempotent_state_survives_a_crash(crash_broker, topic_name):
    """After SIGKILL and restart, a retry of the producer's last batch is still recognised
    (the producer state is rebuilt from the log) and is not written twice."""
    b = start(crash_broker)
    create_topic(b.bootstrap, topic_name)
    r = raw_call(b.port, 22, 4, {"transactional_id": None, "transaction_timeout_ms": 60000,
                                 "producer_id": -1, "producer_epoch": -1})
    pid, epoch = r["producer_id"], r["producer_epoch"]

    def produce(batch):
        r = raw_call(b.port, 0, 9, {"transactional_id": None, "acks": -1, "timeout_ms": 30000, "topic_data": [
            {"name": topic_name, "partition_data": [{"index": 0, "records": batch}]}]})
        return r["responses"][0]["partition_responses"][0]

    batches = [build_batch([(None, b"b%d-%d" % (s, i), BASE_TS, []) for i in range(2)],
                           producer_id=pid, producer_epoch=epoch, base_sequence=s) for s in (0, 2, 4)]
    for i, batch in enumerate(batches):
        r = produce(batch)
        assert (r["error_code"], r["base_offset"]) == (0, 2 * i)
    assert [r.value for r in consume(b.bootstrap, topic_name)] == \
        [b"b%d-%d" % (s, i) for s in (0, 2, 4) for i in range(2)]
    b.kill()
    start(b)
    retry = produce(batches[-1])
    # the error code of a retry is checked in test_bad_input (Kafka: NONE); here, what is stored
    assert retry["error_code"] in (0, 46) and retry["base_offset"] == 4
    assert [r.value for r in consume(b.bootstrap, topic_name)] == \
        [b"b%d-%d" % (s, i) for s in (0, 2, 4) for i in range(2)], "the retry was written again"
    # the sequence continues after the restart
    nxt = build_batch([(None, b"b6-0", BASE_TS, [])], producer_id=pid, producer_epoch=epoch,
                      base_sequence=6)
    r = produce(nxt)
    assert (r["error_code"], r["base_offset"]) == (0, 6)


def test_kcat_produce_through_a_crash(crash_broker, topic_name):
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed"
    b = start(crash_broker)
    create_topic(b.bootstrap, topic_name)
    n = 6000
    # -E: kcat exits when all brokers are down unless told not to (a non-fatal error)
    args = [kcat, "-E", "-b", b.bootstrap, "-P", "-t", topic_name, "-p", "0", "-X", "enable.idempotence=true",
            "-X", "acks=all", "-X", "linger.ms=5"]
    for k, v in RECONNECT.items():
        if k != "retry.backoff.max.ms":  # Debian's kcat has librdkafka 2.0, which predates it
            args += ["-X", f"{k}={v}"]
    proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        first_half = b"".join(b"line-%06d\n" % i for i in range(n // 2))
        proc.stdin.write(first_half)
        proc.stdin.flush()
        wait_until(lambda: proc.poll() is not None or watermarks(b.bootstrap, topic_name)[1] >= n // 6,
                   timeout=60, what="kcat's first records")
        assert proc.poll() is None, proc.stderr.read().decode(errors="replace")
        b.kill()
        proc.stdin.write(b"".join(b"line-%06d\n" % i for i in range(n // 2, 3 * n // 4)))
        proc.stdin.flush()
        start(b)
        proc.stdin.write(b"".join(b"line-%06d\n" % i for i in range(3 * n // 4, n)))
        proc.stdin.close()
        rc = proc.wait(180)
        err = proc.stderr.read().decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert rc == 0, err
    # connection errors while the broker is down are expected; failed deliveries are not
    assert "Delivery failed" not in err and "Failed to produce" not in err, err
    recs = consume(b.bootstrap, topic_name, 0, timeout=60)
    assert [r.offset for r in recs] == list(range(len(recs)))
    assert [r.value for r in recs] == [b"line-%06d" % i for i in range(n)], "lost, duplicated or reordered"
    assert produce_values(b.bootstrap, topic_name, [b"after"]) == [(0, n)]


@pytest.mark.parametrize("how", ["term", "kill"])
def test_topic_config_overrides_still_apply_after_restart(crash_broker, topic_name, how):
    """Per-topic overrides must govern the log after a restart as before it: max.message.bytes
    still refuses a big batch, LogAppendTime still stamps the broker's time."""
    b = start(crash_broker)
    create_topic(b.bootstrap, topic_name, config={"max.message.bytes": "2000",
                                                  "message.timestamp.type": "LogAppendTime"})

    def produce_one(value, ts=None):
        p = Producer({"bootstrap.servers": b.bootstrap, "compression.type": "none", "linger.ms": 0,
                      "message.timeout.ms": 30000})
        res = []
        p.produce(topic_name, value=value, partition=0, timestamp=ts or 0, on_delivery=lambda e, m: res.append(e))
        assert p.flush(WAIT) == 0
        return res[0]

    def check(expected_records):
        big = produce_one(b"x" * 5000)
        assert big is not None and big.code() == KafkaError.MSG_SIZE_TOO_LARGE, \
            f"a 5000-byte batch on a topic with max.message.bytes=2000 got {big}"
        assert produce_one(b"small", ts=BASE_TS) is None
        got = consume(b.bootstrap, topic_name)
        assert [r.value for r in got] == [b"small"] * expected_records
        assert all(r.timestamp_type == TIMESTAMP_LOG_APPEND_TIME and r.timestamp != BASE_TS for r in got), \
            [(r.timestamp_type, r.timestamp) for r in got]

    check(1)
    b.kill() if how == "kill" else b.stop()
    start(b)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
    a = admin(b.bootstrap)
    configs = a.describe_configs([res])[res].result(WAIT)
    assert configs["max.message.bytes"].value == "2000"          # the stored overrides are there...
    check(2)                                                     # ...and must be in force


def test_segment_tail_damaged_at_rest_is_truncated_by_recovery(crash_broker, topic_name):
    """After a SIGKILL the segment's last batch is cut short on disk and the one before has bytes
    changed: recovery finds the first (by its CRC), truncates the log to the last valid batch before
    it, as Kafka's log recovery does, and says so; every record before it reads back and the next
    produce takes its offset. (With replicas, the follower fetches the rest again:
    tests/cluster/test_log_dir_failure.py.)"""
    b = start(crash_broker)
    create_topic(b.bootstrap, topic_name)
    values = [b"record-%02d-" % i + b"x" * 500 for i in range(20)]
    for v in values:  # one batch per record
        assert produce_values(b.bootstrap, topic_name, [v], acks="all")
    b.kill()
    seg = sorted((b.data_dir / "logs" / f"{topic_name}-0").glob("*.log"))[-1]
    size = seg.stat().st_size
    os.truncate(seg, size - 100)  # inside the last batch
    with open(seg, "r+b") as f:
        f.seek(size - 700)  # inside the batch before
        f.write(b"damaged")
    start(b)
    assert [r.value for r in consume(b.bootstrap, topic_name)] == values[:-2]
    assert produce_values(b.bootstrap, topic_name, [b"after"], acks="all") == [(0, 18)]
    log = b.log_text()
    assert "cut" in log and "bytes of invalid data" in log, log[-3000:]
    assert "Traceback" not in log
