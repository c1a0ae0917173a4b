"""MM2's internal records in Kafka's Struct encoding (``OffsetSync``, ``Checkpoint``, ``Heartbeat``).

Struct fields are written in order: STRING as an int16 length and UTF-8, INT16/32/64 big-endian.
Checkpoint and heartbeat values start with a ``{version: int16}`` header (version 0).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def string(self) -> str:
        n = struct.unpack_from(">h", self.data, self.pos)[0]
        self.pos += 2
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s

    def num(self, fmt: str) -> int:
        v = struct.unpack_from(fmt, self.data, self.pos)[0]
        self.pos += struct.calcsize(fmt)
        return v


@dataclass
class OffsetSync:
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int

    def key(self) -> bytes:
        return _str(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">qq", self.upstream_offset, self.downstream_offset)

    @classmethod
    def parse(cls, key: bytes, value: bytes) -> "OffsetSync":
        r = _Reader(key)
        topic, partition = r.string(), r.num(">i")
        up, down = struct.unpack(">qq", value[:16])
        return cls(topic, partition, up, down)


@dataclass
class Checkpoint:
    group: str
    topic: str           # the topic in the target cluster
    partition: int
    upstream_offset: int
    downstream_offset: int
    metadata: str = ""

    def key(self) -> bytes:
        return _str(self.group) + _str(self.topic) + struct.pack(">i", self.partition)

    def value(self) -> bytes:
        return struct.pack(">hqq", 0, self.upstream_offset, self.downstream_offset) + _str(self.metadata)

    @classmethod
    def parse(cls, key: bytes, value: bytes) -> "Checkpoint":
        k = _Reader(key)
        group, topic, partition = k.string(), k.string(), k.num(">i")
        v = _Reader(value)
        v.num(">h")
        up, down = v.num(">q"), v.num(">q")
        return cls(group, topic, partition, up, down, v.string())


@dataclass
class Heartbeat:
    source_alias: str
    target_alias: str
    timestamp: int

    def key(self) -> bytes:
        return _str(self.source_alias) + _str(self.target_alias)

    def value(self) -> bytes:
        return struct.pack(">hq", 0, self.timestamp)

    @classmethod
    def parse(cls, key: bytes, value: bytes) -> "Heartbeat":
        k = _Reader(key)
        return cls(k.string(), k.string(), struct.unpack(">hq", value[:10])[1])
