"""More than one batch of a partition in flight, through a proxy that sees every Produce
request and answer: the in-flight limit holds, order holds, and OUT_OF_ORDER_SEQUENCE_NUMBER
answers (a later batch reaching the broker before an earlier one) are retried in order."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, TopicPartition

import samsa.embedded
from broker_process import free_port
from produce_proxy import CORRUPT_MESSAGE, OUT_OF_ORDER, ProduceProxy
from samsa.client.producer import Producer


def broker_behind(proxy: ProduceProxy, broker_port: int) -> samsa.embedded.Broker:
    return samsa.embedded.Broker({"num.partitions": 1, "listeners": f"PLAINTEXT://127.0.0.1:{broker_port}",
                                  "advertised.listeners": f"PLAINTEXT://127.0.0.1:{proxy.port}"})


def values(bootstrap: str, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "check", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out: list[bytes] = []
    deadline = time.time() + 30
    while len(out) < n and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            out.append(m.value())
    c.close()
    return out


@pytest.mark.parametrize("config, limit", [
    ({}, 5),                                                        # idempotent: Kafka's default and cap
    ({"max.in.flight.requests.per.connection": 2}, 2),
    ({"max.in.flight.requests.per.connection": 8, "enable.idempotence": False, "acks": 1}, 8),
], ids=["idempotent-5", "idempotent-2", "acks1-8"])
def test_batches_in_flight_per_partition_up_to_the_limit_in_order(config, limit):
    port = free_port()
    # After the first (a partition's first batch goes alone, see RecordAccumulator), answers wait until
    # `limit` Produce requests are in flight at once (or 20 s: then the assert fails).
    proxy = ProduceProxy(port, hold_responses=lambda: bool(proxy.answers) and proxy.max_outstanding < limit)
    try:
        with broker_behind(proxy, port) as broker:
            bootstrap = f"127.0.0.1:{proxy.port}"
            with Producer({"bootstrap.servers": bootstrap, "batch.size": 1000, "linger.ms": 0, **config}) as p:
                futures = [p.send("inflight", b"%d" % i) for i in range(400)]
                assert p.flush(60) == 0
                assert [f.result().offset for f in futures] == list(range(400))
            assert proxy.max_outstanding == limit
            assert proxy.produce_requests > limit
            assert values(broker.bootstrap_servers, "inflight", 400) == [b"%d" % i for i in range(400)]
    finally:
        proxy.close()


def test_out_of_order_sequence_answers_are_retried_after_the_earlier_batch():
    port = free_port()
    # The third request is damaged on the way, so the broker refuses it (CORRUPT_MESSAGE, retriable)
    # and then the two after it, which do not follow the sequence it has (OUT_OF_ORDER_SEQUENCE_NUMBER).
    # After the first, answers wait until five requests are in flight, so those two were sent before
    # the refusal came back.
    proxy = ProduceProxy(port, corrupt=lambda n: n == 3,
                         hold_responses=lambda: bool(proxy.answers) and proxy.max_outstanding < 5)
    try:
        with broker_behind(proxy, port) as broker:
            with Producer({"bootstrap.servers": f"127.0.0.1:{proxy.port}", "batch.size": 1000, "linger.ms": 0,
                           "retry.backoff.ms": 20}) as p:
                futures = [p.send("ooo", b"%d" % i) for i in range(300)]
                assert p.flush(60) == 0
                assert [f.result().offset for f in futures] == list(range(300))
            assert proxy.answers[2:5] == [CORRUPT_MESSAGE, OUT_OF_ORDER, OUT_OF_ORDER]
            assert values(broker.bootstrap_servers, "ooo", 300) == [b"%d" % i for i in range(300)]  # once, in order
    finally:
        proxy.close()
