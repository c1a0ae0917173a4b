"""Client quotas on a real broker (KIP-219): a producer held to producer_byte_rate=1 MiB/s
measures within 10 % of it over a 30 s window and is told throttle_time_ms > 0, while an
unthrottled tenant beside it keeps its own rate; quotas set and described through Samsa's
Admin (AlterClientQuotas/DescribeClientQuotas); connection limits refuse beyond the limit."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from confluent_kafka import Producer

from broker_process import BrokerProcess
from samsa import Admin
from samsa.client.types import NewTopic
from waiting import wait_until

QUOTA = 1024 * 1024
WARMUP_S, WINDOW_S = 3.0, 30.0  # the issue measures over 30 s


@pytest.fixture(scope="module")
def quota_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("quotas"), **{
        "quota.window.num": 3, "quota.window.size.seconds": 1,
        "max.connections.per.ip.overrides": "127.0.0.2:2"})
    b.start()
    yield b
    b.stop()


def test_quotas_are_altered_and_described(quota_broker):
    with Admin({"bootstrap.servers": quota_broker.bootstrap}) as admin:
        admin.alter_client_quotas([({"user": None}, {"request_percentage": 200.0}),
                                   ({"client-id": "c1"}, {"consumer_byte_rate": 2048})])
        found = admin.describe_client_quotas([("client-id", "c1", True)])
        assert found == [({"client-id": "c1"}, {"consumer_byte_rate": 2048.0})]
        assert ({"user": None}, {"request_percentage": 200.0}) in admin.describe_client_quotas()
        with pytest.raises(Exception, match="positive|INVALID_REQUEST"):
            admin.alter_client_quotas([({"client-id": "c1"}, {"producer_byte_rate": -5})])
        admin.alter_client_quotas([({"user": None}, {"request_percentage": None}),
                                   ({"client-id": "c1"}, {"consumer_byte_rate": None})])
        assert admin.describe_client_quotas() == []


def _produce_for(conf: dict, topic: str, seconds: float, delivered: list, throttles: list) -> None:
    """Produce 8 KiB records as fast as the broker lets us; (time, bytes) of each delivery."""
    p = Producer({**conf, "linger.ms": 5, "batch.size": 65536, "compression.type": "none",
                  "queue.buffering.max.kbytes": 4096,
                  "throttle_cb": lambda ev: throttles.append(ev.throttle_time)})
    value = b"x" * 8192
    end = time.monotonic() + seconds
    cb = lambda e, m: e is None and delivered.append((time.monotonic(), len(m.value())))  # noqa: E731
    while time.monotonic() < end:
        try:
            p.produce(topic, value, on_delivery=cb)
        except BufferError:
            p.poll(0.05)
            continue
        p.poll(0)
    p.purge(in_flight=False)  # what waits in the queue is not measured: drop it
    p.flush(10)


def _rate(delivered: list, start: float) -> float:
    in_window = [n for t, n in delivered if start + WARMUP_S <= t < start + WARMUP_S + WINDOW_S]
    return sum(in_window) / WINDOW_S


def test_a_producer_held_to_its_byte_rate_beside_an_unthrottled_one(quota_broker):
    with Admin({"bootstrap.servers": quota_broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("quota-slow", 1, 1), NewTopic("quota-fast", 1, 1)])
        admin.alter_client_quotas([({"client-id": "slow-tenant"}, {"producer_byte_rate": QUOTA})])
    slow, fast, throttles, fast_throttles = [], [], [], []
    start = time.monotonic()
    runs = [threading.Thread(target=_produce_for, args=(
                {"bootstrap.servers": quota_broker.bootstrap, "client.id": cid}, topic,
                WARMUP_S + WINDOW_S, out, th)) for cid, topic, out, th in (
                    ("slow-tenant", "quota-slow", slow, throttles), ("fast-tenant", "quota-fast", fast, fast_throttles))]
    for r in runs:
        r.start()
    for r in runs:
        r.join()
    slow_rate, fast_rate = _rate(slow, start), _rate(fast, start)
    assert abs(slow_rate - QUOTA) / QUOTA < 0.10, f"{slow_rate / QUOTA:.2f} MiB/s"
    assert any(t > 0 for t in throttles), "no throttle_time_ms > 0 reached the producer"
    assert fast_rate > 2 * QUOTA, f"the unthrottled tenant made only {fast_rate / QUOTA:.2f} MiB/s"
    assert not any(t > 0 for t in fast_throttles)


def test_connections_beyond_the_per_ip_limit_are_refused(quota_broker):
    def connect() -> socket.socket:
        s = socket.create_connection(("127.0.0.1", quota_broker.port), source_address=("127.0.0.2", 0))
        return s
    held = [connect(), connect()]
    try:
        third = connect()
        third.settimeout(10)
        assert third.recv(1) == b""  # closed by the broker at once
        wait_until(lambda: "address already has the configured maximum of 2 connections" in quota_broker.log_text(),
                   "the broker's log line")
    finally:
        for s in held:
            s.close()
    wait_until(lambda: _accepted(connect), "a connection accepted once the others closed")


def _accepted(connect) -> bool:
    s = connect()
    try:
        s.sendall(b"\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")  # ApiVersions v0, no client id
        s.settimeout(5)
        return len(s.recv(4)) == 4
    finally:
        s.close()
