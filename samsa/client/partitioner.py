"""Choosing a record's partition, as Java's producer and librdkafka's ``murmur2_random`` do.

An explicit partition wins; a keyed record goes to ``toPositive(murmur2(key)) % partitions``
(Java's ``Utils.murmur2``, so keys land where a Java producer puts them); keyless records
stick to one partition until its batch is sent (KIP-480's sticky partitioner).
"""

from __future__ import annotations

import random

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Java's ``org.apache.kafka.common.utils.Utils.murmur2``: a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    end = length & ~3
    for i in range(0, end, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[end + 2] << 16
    if rest >= 2:
        h ^= data[end + 1] << 8
    if rest >= 1:
        h ^= data[end]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return to_positive(murmur2(key)) % num_partitions


class StickyPartitioner:
    """Keyed records by murmur2; keyless ones stay on one partition until ``on_new_batch``."""

    def __init__(self) -> None:
        self._sticky: dict[str, int] = {}

    def partition(self, topic: str, key: bytes | None, num_partitions: int) -> int:
        if key is not None:
            return partition_for_key(key, num_partitions)
        p = self._sticky.get(topic)
        if p is None or p >= num_partitions:
            p = self._sticky[topic] = random.randrange(num_partitions)
        return p

    def on_new_batch(self, topic: str, previous: int, num_partitions: int) -> None:
        """The sticky partition's batch went out: pick another one for the next keyless records."""
        if num_partitions > 1 and self._sticky.get(topic) == previous:
            choices = [p for p in range(num_partitions) if p != previous]
            self._sticky[topic] = random.choice(choices)
