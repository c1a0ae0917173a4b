"""Kafka's client metrics kept by Samsa's Producer and Consumer (``metrics()``)."""

from __future__ import annotations

import math

from samsa import Consumer, Producer, TopicPartition
from samsa.client.metrics import MetricName, format_metrics

RECORDS = 300


def by_name(metrics: dict[MetricName, float], group: str) -> dict[str, float]:
    return {m.name: v for m, v in metrics.items() if m.group == group}


def test_producer_and_consumer_keep_kafkas_metrics(broker, topic_name):
    with Producer({"bootstrap.servers": broker.bootstrap, "client.id": "metered-producer", "linger.ms": 5}) as p:
        for i in range(RECORDS):
            p.send(topic_name, b"v" * 40, partition=0)
        p.flush()
        metrics = p.metrics()
    assert all(m.tags == (("client-id", "metered-producer"),) for m in metrics)
    pm = by_name(metrics, "producer-metrics")
    assert pm["record-send-total"] == RECORDS
    assert pm["record-error-total"] == 0 and pm["record-retry-total"] == 0
    assert pm["request-total"] >= 1 and pm["request-rate"] > 0
    assert pm["record-send-rate"] > 0
    assert pm["batch-size-avg"] > 40 and pm["batch-size-max"] >= pm["batch-size-avg"]
    assert pm["records-per-request-avg"] * pm["request-total"] == RECORDS
    assert pm["request-latency-avg"] > 0 and pm["request-latency-max"] >= pm["request-latency-avg"]
    assert pm["outgoing-byte-total"] >= pm["batch-size-avg"]
    assert pm["buffer-available-bytes"] == pm["buffer-total-bytes"] == 33554432

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic_name, 0)])
        seen = 0
        while seen < RECORDS:
            seen += len(consumer.poll(2.0))
        cm = consumer.metrics()
    finally:
        consumer.close()
    fetch = by_name(cm, "consumer-fetch-manager-metrics")
    assert fetch["records-consumed-total"] == RECORDS
    assert fetch["bytes-consumed-total"] >= RECORDS * 40
    assert fetch["fetch-total"] >= 1 and fetch["fetch-latency-avg"] >= 0
    assert fetch["records-lag-max"] >= 0 and fetch["fetch-size-max"] > 0
    assert by_name(cm, "consumer-coordinator-metrics")["assigned-partitions"] == 1
    assert next(m for m in cm).tags[0][0] == "client-id"


def test_metrics_print_as_kafkas_tools_print_them():
    text = format_metrics({MetricName("record-send-rate", "producer-metrics", (("client-id", "p-1"),)): 12.5,
                           MetricName("batch-size-avg", "producer-metrics", (("client-id", "p-1"),)): math.nan})
    lines = text.splitlines()
    assert lines[0] == ""
    assert lines[1].split() == ["Metric", "Name", "Value"]
    assert lines[2] == "producer-metrics:batch-size-avg:{client-id=p-1}   : NaN"
    assert lines[3] == "producer-metrics:record-send-rate:{client-id=p-1} : 12.500"
