"""Issue 33 on a three-broker ZooKeeper cluster: a topic of 1,500 partitions (replication factor 3)
created, deleted and created again under its name. The broker that handles each request and the
two that learn it from ZooKeeper's watches make and remove the partitions' logs on worker
threads and in slices of their event loops; every broker ends with exactly the new topic's
partitions, and a record produced with acks=all is read back."""

from __future__ import annotations

import socket
import struct

import pytest

from cluster_harness import Cluster

from samsa import Consumer, Producer, TopicPartition
from samsa.protocol.api import decode_response, encode_request
from waiting import wait_until

pytestmark = pytest.mark.timeout(600)
TOPIC = "wide-cluster"
N = 1500


def call(b, api_key: int, version: int, body: dict) -> dict:
    with socket.create_connection(("127.0.0.1", b.port), timeout=120) as s:
        s.sendall(b"".join(bytes(c) for c in encode_request(api_key, version, 1, "cluster-test", body)))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, "the broker closed the connection"
            buf += chunk
    return decode_response(api_key, version, buf[4:])[1]


def partitions(b, topic: str) -> int | None:
    r = call(b, 3, 12, {"topics": [{"name": topic, "topic_id": bytes(16)}], "allow_auto_topic_creation": False,
                        "include_topic_authorized_operations": False})
    t = r["topics"][0]
    return None if t["error_code"] else len(t["partitions"])


def hosted_dirs(b, topic: str) -> int:
    logs = b.data_dir / "logs"
    return sum(1 for p in logs.iterdir() if p.name.startswith(f"{topic}-") and not p.name.endswith("-delete"))


def test_create_delete_create_again_on_every_broker(tmp_path):
    cluster = Cluster(tmp_path)
    try:
        cluster.start()
        first = cluster.brokers[0]
        topic = {"name": TOPIC, "num_partitions": N, "replication_factor": 3, "assignments": [], "configs": []}
        r = call(first, 19, 5, {"topics": [topic], "timeout_ms": 120000, "validate_only": False})
        assert r["topics"][0]["error_code"] in (0, 7), r  # 7: it goes on in the background
        for b in cluster.brokers.values():
            wait_until(lambda: partitions(b, TOPIC) == N and hosted_dirs(b, TOPIC) == N,
                       f"broker {b.overrides['broker.id']} hosting {N} partitions", 300)
        r = call(cluster.brokers[1], 20, 4, {"topic_names": [TOPIC], "timeout_ms": 120000})
        assert r["responses"][0]["error_code"] in (0, 7), r
        for b in cluster.brokers.values():
            wait_until(lambda: partitions(b, TOPIC) is None and hosted_dirs(b, TOPIC) == 0,
                       f"broker {b.overrides['broker.id']} without the topic", 300)
        r = call(cluster.brokers[2], 19, 5, {"topics": [dict(topic, num_partitions=2)], "timeout_ms": 120000,
                                              "validate_only": False})
        assert r["topics"][0]["error_code"] == 0, r
        for b in cluster.brokers.values():
            wait_until(lambda: partitions(b, TOPIC) == 2 and hosted_dirs(b, TOPIC) == 2,
                       f"broker {b.overrides['broker.id']} hosting the new topic", 120)
        with Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"}) as p:
            p.send(TOPIC, b"after", partition=1).result(60)
        c = Consumer({"bootstrap.servers": cluster.bootstrap, "auto.offset.reset": "earliest",
                      "fetch.max.wait.ms": 100})
        try:
            c.assign([TopicPartition(TOPIC, 1)])
            got = wait_until(lambda: [r.value for r in c.poll(0.5)] or None, "the record read back", 60)
        finally:
            c.close()
        assert got == [b"after"]
        for b in cluster.brokers.values():  # no traceback, no log recovered from a half-made directory
            text = b.log_text()
            assert "Traceback" not in text and "recovering segment" not in text
    finally:
        cluster.stop()
