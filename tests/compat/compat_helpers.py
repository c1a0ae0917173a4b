"""Helpers shared by the client-compatibility tests (plain functions, no fixtures).

Everything here waits with a bound (a deadline), never asserts on how long anything took.
"""

from __future__ import annotations

import socket
import struct
import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from samsa.protocol.api import decode_response, encode_request

WAIT = 30.0  # seconds: the bound of every wait for the broker

# Record timestamps of the tests: an hour ago, on a whole second. Recent enough that time-based
# retention (7 days by default) never deletes a test's records, old enough to be in the past.
BASE_TS = (int(time.time()) - 3600) * 1000


from broker_process import BrokerProcess  # noqa: E402,F401  (used by the tests)
from waiting import wait_until  # noqa: F401  (the shared wait; test modules import it from here too)


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple | None
    timestamp_type: int
    timestamp: int


def start(b):
    """``b.start()``, with the tail of the broker's log if it does not come up."""
    try:
        return b.start()
    except (RuntimeError, TimeoutError) as e:
        raise AssertionError(f"the broker did not start: {e}\n{b.log_text()[-4000:]}") from None


def raw_call(port: int, api_key: int, version: int, body: dict) -> dict:
    """One request on a fresh connection, built and read with Samsa's own codec."""
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as s:
        s.sendall(b"".join(bytes(c) for c in encode_request(api_key, version, 1, "compat-test", body)))
        buf = b""
        while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
            chunk = s.recv(65536)
            assert chunk, "the broker closed the connection"
            buf += chunk
        return decode_response(api_key, version, buf[4:])[1]


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: dict | None = None) -> None:
    a = admin(bootstrap)  # keep the handle alive until the future resolves
    fs = a.create_topics([NewTopic(name, partitions, 1, config=config or {})],
                         operation_timeout=WAIT, request_timeout=WAIT)
    fs[name].result(WAIT)


def producer(bootstrap: str, **conf) -> Producer:
    base = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 60000}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Producer(base)


def consumer(bootstrap: str, **conf) -> Consumer:
    base = {"bootstrap.servers": bootstrap, "group.id": "samsa-compat", "enable.auto.commit": False,
            "enable.auto.offset.store": False, "enable.partition.eof": False,
            "fetch.wait.max.ms": 100}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(base)


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = consumer(bootstrap)
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=WAIT, cached=False)
    finally:
        c.close()


def to_rec(m) -> Rec:
    headers = m.headers()
    return Rec(m.partition(), m.offset(), m.key(), m.value(),
               tuple(headers) if headers is not None else None, *m.timestamp())


def consume(bootstrap: str, topic: str, partition: int = 0, start: int = OFFSET_BEGINNING,
            count: int | None = None, timeout: float = WAIT, **conf) -> list[Rec]:
    """Records of one partition from ``start``: ``count`` of them, or up to the high watermark."""
    c = consumer(bootstrap, **conf)
    try:
        if count is None:
            _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=WAIT, cached=False)
        c.assign([TopicPartition(topic, partition, start)])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout
        while True:
            if count is not None and len(out) >= count:
                break
            if count is None and (out and out[-1].offset >= high - 1 or high == 0):
                break
            if time.monotonic() > deadline:
                raise AssertionError(f"consumed {len(out)} records of {topic}-{partition}, wanted "
                                     f"{count if count is not None else f'up to offset {high}'}")
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append(to_rec(m))
        return out
    finally:
        c.close()


def produce_values(bootstrap: str, topic: str, values, partition: int = 0, **conf) -> list[tuple[int, int]]:
    """Produce and flush; the (partition, offset) of each delivery, in the order delivered."""
    p = producer(bootstrap, **conf)
    acked: list[tuple[int, int]] = []
    errors: list = []

    def dr(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked.append((msg.partition(), msg.offset()))

    for v in values:
        p.produce(topic, value=v, partition=partition, on_delivery=dr)
        p.poll(0)
    remaining = p.flush(WAIT)
    assert remaining == 0, f"{remaining} messages still in the producer queue"
    assert not errors, errors
    return acked
