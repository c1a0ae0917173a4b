"""`samsa consumer-perf-test`: Kafka's flags and output, for each client it can drive."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import Producer

from cli_tools import samsa
from samsa.client.types import NewTopic

HEADER = ("start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, "
          "fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec")
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
ROW = re.compile(rf"^({DATE}), ({DATE}), (\d+\.\d{{4}}), (\d+\.\d{{4}}), (\d+), (\d+\.\d{{4}}), (\d+), (-?\d+), "
                 rf"(\d+\.\d{{4}}), (\d+\.\d{{4}})$")


@pytest.fixture(scope="module")
def perf_topic(broker, admin):
    admin.create_topics([NewTopic("perf", 2, 1)])
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5})
    for _ in range(5000):
        p.produce("perf", b"x" * 100)
    assert p.flush(30) == 0
    return "perf"


def perf(broker, *args: str):
    return samsa("consumer-perf-test", "--bootstrap-server", broker.bootstrap_servers, *args, timeout=120)


@pytest.mark.parametrize("client", ["samsa", "confluent", "kafka-python", "aiokafka"])
def test_kafkas_output_for_each_client(broker, perf_topic, client):
    r = perf(broker, "--topic", perf_topic, "--messages", "5000", "--client", client)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == HEADER
    m = ROW.match(lines[1])
    assert m, lines[1]
    assert int(m.group(5)) >= 5000
    assert abs(float(m.group(3)) - int(m.group(5)) * 100 / 1024 / 1024) < 0.01  # MB of values
    assert float(m.group(6)) > 0


def test_detailed_stats_hide_header_and_timeout(broker, perf_topic):
    r = perf(broker, "--topic", perf_topic, "--messages", "5000", "--show-detailed-stats", "--reporting-interval", "1",
             "--fetch-size", "20000")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("time, threadId, data.consumed.in.MB")
    assert len(lines) >= 2 and all(re.match(rf"^{DATE}, 0, \d+\.\d{{4}}, ", line) for line in lines[1:])
    r = perf(broker, "--topic", perf_topic, "--messages", "6000", "--hide-header", "--timeout", "1500")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("WARNING: Exiting before consuming the expected number of messages: timeout (1500 ms)")
    assert ROW.match(lines[1]) and ROW.match(lines[1]).group(5) == "5000"


def test_usage(broker):
    r = samsa("consumer-perf-test")
    assert r.returncode == 1 and "--messages" in r.stderr
    r = perf(broker, "--topic", "perf")
    assert r.returncode == 1 and "messages" in r.stderr


def test_print_metrics_prints_the_consumers_metrics(broker, perf_topic, tmp_path):
    config = tmp_path / "consumer.properties"
    config.write_text("client.id=perf-consumer\n")
    r = perf(broker, "--topic", perf_topic, "--messages", "5000", "--print-metrics", "--group", "perf-metrics",
             "--consumer.config", str(config))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert ROW.match(lines[1]), lines
    header = lines.index(next(line for line in lines if line.startswith("Metric Name")))
    table = {name.rstrip(): value for name, value in (line.rsplit(" : ", 1) for line in lines[header + 1:])}
    consumed = float(table["consumer-fetch-manager-metrics:records-consumed-total:{client-id=perf-consumer}"])
    assert consumed >= 5000
    assert float(table["consumer-fetch-manager-metrics:fetch-latency-avg:{client-id=perf-consumer}"]) >= 0
    assert "consumer-fetch-manager-metrics:records-lag-max:{client-id=perf-consumer}" in table
