"""Samsa's Consumer against librdkafka's mock cluster: an independent implementation of the
Kafka protocol (fetch, list offsets, the group coordinator), written by confluent-kafka."""

from __future__ import annotations

import logging
import re
import subprocess
import sys
import time

import pytest
from confluent_kafka import Producer as CKProducer

from broker_process import ROOT
from samsa.client.consumer import Consumer, TopicPartition


@pytest.fixture(scope="module")
def mock():
    """bench/mock_broker.py: the mock cluster in its own process, topics made on request."""
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "mock_broker.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline().split()[1])

    def create(topic: str, partitions: int) -> None:
        proc.stdin.write(f"CREATE {topic} {partitions}\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "OK"
    try:
        yield f"127.0.0.1:{port}", create
    finally:
        proc.stdin.close()
        proc.wait(10)


def produce(bootstrap: str, topic: str, n: int, **kw) -> None:
    p = CKProducer({"bootstrap.servers": bootstrap, **kw})
    for i in range(n):
        p.produce(topic, b"v%d" % i, key=b"k%d" % (i % 7), headers=[("n", b"%d" % i)], timestamp=1_600_000_000_000 + i)
    assert p.flush(30) == 0


def read(c: Consumer, n: int, timeout: float = 30) -> list:
    out: list = []
    deadline = time.time() + timeout
    while len(out) < n and time.time() < deadline:
        out += c.poll(0.2)
    return out


def test_assign_reads_what_confluent_wrote_to_the_mock(mock):
    bootstrap, create = mock
    create("m-assign", 3)
    produce(bootstrap, "m-assign", 300, **{"compression.type": "lz4"})
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest"}) as c:
        c.assign([TopicPartition("m-assign", p) for p in range(3)])
        got = read(c, 300)
        assert sorted(int(r.value[1:]) for r in got) == list(range(300))
        for r in got:
            i = int(r.value[1:])
            assert (r.key, r.headers, r.timestamp) == (b"k%d" % (i % 7), (("n", b"%d" % i),), 1_600_000_000_000 + i)
        tp = TopicPartition("m-assign", 0)
        end = c.end_offsets([tp])[tp]
        assert end == sum(1 for r in got if r.partition == 0) and c.beginning_offsets([tp])[tp] == 0
        c.seek(tp, 3)
        assert read(c, 1)[0].offset == 3


def test_group_on_the_mock_coordinator_commits_and_resumes(mock):
    bootstrap, create = mock
    create("m-group", 4)
    produce(bootstrap, "m-group", 200)
    config = {"bootstrap.servers": bootstrap, "group.id": "m-g", "auto.offset.reset": "earliest",
              "enable.auto.commit": False, "heartbeat.interval.ms": 300, "session.timeout.ms": 6000}
    with Consumer(config) as c:
        c.subscribe(["m-group"])
        got = read(c, 200)
        assert sorted(int(r.value[1:]) for r in got) == list(range(200))
        assert len(c.assignment()) == 4
        c.commit()
        committed = c.committed(sorted(c.assignment()))
        assert sum(o.offset for o in committed.values()) == 200
    produce(bootstrap, "m-group", 20)
    with Consumer(config) as c:
        c.subscribe(["m-group"])
        assert len(read(c, 20)) == 20  # from the committed offsets: only the new ones
        assert c.poll(0.5) == []


def test_mock_started_in_this_process_found_by_its_log_line():
    """The mock as the docs start it: a confluent-kafka client with test.mock.num.brokers (3
    here), its port taken from the log line
    "... replaced with 127.0.0.1:PORT"."""
    ports: list[int] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            m = re.search(r"replaced with 127\.0\.0\.1:(\d+)", record.getMessage())
            if m and not ports:
                ports.append(int(m.group(1)))

    logger = logging.getLogger("samsa-test-mock")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Grab())
    logger.propagate = False
    producer = CKProducer({"test.mock.num.brokers": "3", "bootstrap.servers": "x:1", "debug": "mock",
                           "logger": logger})
    deadline = time.time() + 10
    while not ports and time.time() < deadline:
        producer.poll(0.05)
    assert ports, "no mock port in the log"
    for i in range(200):  # the mock auto-creates the topic (4 partitions)
        producer.produce("inproc", b"x%d" % i, partition=i % 4)
    assert producer.flush(30) == 0
    with Consumer({"bootstrap.servers": f"127.0.0.1:{ports[0]}", "auto.offset.reset": "earliest",
                   "group.id": "inproc-g", "heartbeat.interval.ms": 300}) as c:
        c.subscribe(["inproc"])
        got = read(c, 200)
        assert sorted(r.value for r in got) == sorted(b"x%d" % i for i in range(200))
        # The mock's brokers lead them (where: the mock's choice, at times all on one broker in
        # a long run; fetching from several brokers and following a moved leader are the
        # "moving" test's, on bench/mock_broker.py, which places leaders itself).
        assert {p.leader for p in c.partitions_for("inproc")} <= {1, 2, 3}
    del producer


def test_leader_moves_mid_read_metadata_is_refreshed():
    """NOT_LEADER_OR_FOLLOWER: the consumer looks up the new leader and reads on from it."""
    import ctypes
    sys.path.insert(0, str(ROOT / "bench"))
    from mock_broker import librdkafka_path
    lib = ctypes.CDLL(librdkafka_path())
    lib.rd_kafka_conf_new.restype = ctypes.c_void_p
    lib.rd_kafka_conf_set.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p,
                                      ctypes.c_size_t]
    lib.rd_kafka_new.restype = ctypes.c_void_p
    lib.rd_kafka_new.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.rd_kafka_mock_cluster_new.restype = ctypes.c_void_p
    lib.rd_kafka_mock_cluster_new.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.rd_kafka_mock_cluster_bootstraps.restype = ctypes.c_char_p
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [ctypes.c_void_p]
    lib.rd_kafka_mock_topic_create.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_partition_set_leader.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int32,
                                                       ctypes.c_int32]
    err = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    lib.rd_kafka_conf_set(conf, b"log_level", b"3", err, len(err))
    rk = lib.rd_kafka_new(0, conf, err, len(err))
    mc = lib.rd_kafka_mock_cluster_new(rk, 3)
    bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mc).decode()
    assert lib.rd_kafka_mock_topic_create(mc, b"moving", 1, 3) == 0
    assert lib.rd_kafka_mock_partition_set_leader(mc, b"moving", 0, 1) == 0
    produce(bootstrap, "moving", 100)
    tp = TopicPartition("moving", 0)
    with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "max.poll.records": 10,
                   "retry.backoff.ms": 50}) as c:
        c.assign([tp])
        got = read(c, 100)
        assert c.partitions_for("moving")[0].leader == 1
        assert lib.rd_kafka_mock_partition_set_leader(mc, b"moving", 0, 3) == 0
        produce(bootstrap, "moving", 100)
        got += read(c, 100)
        assert [r.offset for r in got] == list(range(200))
        assert c.partitions_for("moving")[0].leader == 3
