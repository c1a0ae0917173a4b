"""murmur2 as Java computes it, and keys landing on the partitions librdkafka's murmur2 picks."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

import samsa.embedded
from samsa.client.partitioner import StickyPartitioner, murmur2, partition_for_key

# Kafka's UtilsTest.testMurmur2 vectors.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("data,expected", JAVA_VECTORS.items())
def test_java_vectors(data, expected):
    assert murmur2(data) == expected


def test_keys_land_where_librdkafka_murmur2_puts_them():
    landed: dict[bytes, int] = {}
    with samsa.embedded.Broker({"num.partitions": 7}) as b:
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "partitioner": "murmur2_random", "linger.ms": 5})
        for i in range(1000):
            key = b"key-%d" % i
            p.produce("keys", key=key, value=b"v",
                      on_delivery=lambda err, msg: landed.__setitem__(msg.key(), msg.partition()))
        assert p.flush(30) == 0
    assert len(landed) == 1000
    assert all(partition_for_key(k, 7) == part for k, part in landed.items())


def test_sticky_keyless_partition_changes_only_on_new_batch():
    s = StickyPartitioner()
    first = s.partition("t", None, 6)
    assert all(s.partition("t", None, 6) == first for _ in range(100))
    s.on_new_batch("t", first, 6)
    assert s.partition("t", None, 6) != first
    assert s.partition("t", b"k", 6) == partition_for_key(b"k", 6)
