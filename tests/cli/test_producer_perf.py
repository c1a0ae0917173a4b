"""`samsa producer-perf-test`: Kafka's flags and output, for each client it can drive."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Consumer, TopicPartition

from cli_tools import one_error_line, samsa
from samsa.client.types import NewTopic

FINAL = re.compile(r"^(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg latency, "
                   r"\d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$")


def end_offset(broker, topic: str) -> int:
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "offsets"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


@pytest.mark.parametrize("client", ["samsa", "confluent", "kafka-python", "aiokafka"])
def test_each_client_sends_every_record_and_prints_kafkas_summary(broker, admin, client):
    topic = f"pp-{client}"
    admin.create_topics([NewTopic(topic, 1, 1)])
    r = samsa("producer-perf-test", "--topic", topic, "--num-records", "3000", "--record-size", "100",
              "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap_servers}", "acks=1",
              "linger.ms=5", "--client", client)
    assert r.returncode == 0, r.stderr
    m = FINAL.match(r.stdout.strip().splitlines()[-1])
    assert m and m.group(1) == "3000", r.stdout
    assert end_offset(broker, topic) == 3000


@pytest.mark.parametrize("client", ["samsa", "confluent"])
def test_transactions_every_duration(broker, admin, client):
    """--transactional-id / --transaction-duration-ms: every record committed, in several transactions."""
    topic = f"pp-txn-{client}"
    admin.create_topics([NewTopic(topic, 1, 1)])
    r = samsa("producer-perf-test", "--topic", topic, "--num-records", "2000", "--record-size", "100",
              "--throughput", "4000", "--producer-props", f"bootstrap.servers={broker.bootstrap_servers}",
              "--transactional-id", f"pp-{client}", "--transaction-duration-ms", "100", "--client", client)
    assert r.returncode == 0, r.stderr
    m = FINAL.match(r.stdout.strip().splitlines()[-1])
    assert m and m.group(1) == "2000", r.stdout
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "pp-txn",
                  "isolation.level": "read_committed"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        c.close()
    assert high > 2001  # the records and a commit marker per transaction, all stable
    r = samsa("producer-perf-test", "--topic", topic, "--num-records", "1", "--record-size", "1", "--throughput",
              "-1", "--bootstrap-server", broker.bootstrap_servers, "--transaction-duration-ms", "0")
    assert "greater than zero" in one_error_line(r)


def test_throttle_payload_file_and_config_file(broker, admin, tmp_path):
    admin.create_topics([NewTopic("pp-file", 1, 1)])
    payloads = tmp_path / "payloads.txt"
    payloads.write_text("alpha\nbeta\ngamma\n")
    config = tmp_path / "producer.properties"
    config.write_text(f"bootstrap.servers={broker.bootstrap_servers}\nacks=all\n")
    r = samsa("producer-perf-test", "--topic", "pp-file", "--num-records", "200", "--payload-file", str(payloads),
              "--throughput", "400", "--producer.config", str(config))
    assert r.returncode == 0, r.stderr
    assert FINAL.match(r.stdout.strip().splitlines()[-1])
    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "pp", "enable.auto.commit": False})
    c.assign([TopicPartition("pp-file", 0, 0)])
    values = set()
    while len(values) < 3:
        msg = c.poll(5)
        assert msg is not None
        values.add(msg.value())
    c.close()
    assert values == {b"alpha", b"beta", b"gamma"}


def test_usage_errors_are_one_line(broker):
    base = ["producer-perf-test", "--topic", "x", "--num-records", "1", "--throughput", "-1"]
    assert "record-size or --payload-file" in one_error_line(samsa(*base, "--producer-props",
                                                                   "bootstrap.servers=h:1"))
    assert "bootstrap.servers" in one_error_line(samsa(*base, "--record-size", "10"))
    assert "acks" in one_error_line(samsa(*base, "--record-size", "10", "--producer-props",
                                          f"bootstrap.servers={broker.bootstrap_servers}", "acks=most"))


def test_print_metrics_prints_the_producers_metrics(broker, admin):
    admin.create_topics([NewTopic("pp-metrics", 1, 1)])
    r = samsa("producer-perf-test", "--topic", "pp-metrics", "--num-records", "500", "--record-size", "50",
              "--throughput", "-1", "--producer-props", f"bootstrap.servers={broker.bootstrap_servers}",
              "client.id=perf", "--print-metrics")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    header = lines.index(next(line for line in lines if line.startswith("Metric Name")))
    table = {name.rstrip(): value for name, value in (line.rsplit(" : ", 1) for line in lines[header + 1:])}
    assert float(table["producer-metrics:record-send-total:{client-id=perf}"]) == 500
    assert float(table["producer-metrics:request-latency-avg:{client-id=perf}"]) > 0
