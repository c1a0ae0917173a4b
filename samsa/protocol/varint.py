"""Varints: Kafka's unsigned LEB128 (compact lengths, tagged fields) and zig-zag signed
varints and varlongs (record fields). The one implementation, for the message codec and
the record format alike.
"""

from __future__ import annotations

UVARINT_TABLE_SIZE = 1 << 14  # every unsigned value that fits in two varint bytes


def encode_long_uvarint(u: int) -> bytes:
    if u < 0:
        raise ValueError(f"unsigned varint cannot hold {u}")
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


UVARINT_BYTES: list[bytes] = [encode_long_uvarint(u) for u in range(UVARINT_TABLE_SIZE)]


def encode_uvarint(u: int) -> bytes:
    """Unsigned LEB128, as the protocol's compact lengths and tagged fields use."""
    if 0 <= u < UVARINT_TABLE_SIZE:
        return UVARINT_BYTES[u]
    return encode_long_uvarint(u)


def encode_varint(n: int) -> bytes:
    """Zig-zag signed varint/varlong; ``n`` must fit in an int64."""
    z = (n << 1) ^ (n >> 63)
    if z < UVARINT_TABLE_SIZE:
        return UVARINT_BYTES[z]
    return encode_long_uvarint(z)


def decode_uvarint(buf, pos: int) -> tuple[int, int]:
    """``(value, next_pos)``. IndexError if ``buf`` ends inside; ValueError past 10 bytes."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint is longer than 10 bytes")


def decode_varint(buf, pos: int) -> tuple[int, int]:
    """Zig-zag signed ``(value, next_pos)``."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = decode_uvarint(buf, pos)
    return (u >> 1) ^ -(u & 1), pos


def varint_size(n: int) -> int:
    return len(encode_varint(n))
