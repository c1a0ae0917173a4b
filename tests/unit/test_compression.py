"""Codecs of record batches, checked against independent implementations."""

from __future__ import annotations

import gzip
import io
import json
import struct
import types

import cramjam
import lz4.frame
import pytest
import zstandard

from samsa.protocol import compression as c
from samsa.protocol.errors import CorruptRecordError, UnsupportedCompressionTypeError

CODECS = [c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]
COMPRESSED = [c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD]

# Compressible and over 64 KiB, so lz4 and xerial use several blocks.
DATA = json.dumps([{"id": i, "user": f"user-{i % 97}", "event": "click"} for i in range(4000)]).encode()


def test_codec_ids_match_kafka():
    assert (c.NONE, c.GZIP, c.SNAPPY, c.LZ4, c.ZSTD) == (0, 1, 2, 3, 4)
    assert c.CODEC_NAMES == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("given, expected", [("gzip", 1), ("ZSTD", 4), (" lz4 ", 3), ("none", 0), (2, 2), (None, 0)])
def test_codec_id(given, expected):
    assert c.codec_id(given) == expected


@pytest.mark.parametrize("bad", ["brotli", 5, -1, 7])
def test_codec_id_unknown(bad):
    with pytest.raises(UnsupportedCompressionTypeError):
        c.codec_id(bad)


def test_codec_name():
    assert c.codec_name(3) == "lz4"
    with pytest.raises(UnsupportedCompressionTypeError):
        c.codec_name(9)


@pytest.mark.parametrize("codec", [5, 6, 7])
def test_unknown_codec_raises(codec):
    with pytest.raises(UnsupportedCompressionTypeError):
        c.compress(codec, b"x")
    with pytest.raises(UnsupportedCompressionTypeError):
        c.decompress(codec, b"x")


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_round_trip_buffer_kinds(codec, kind):
    packed = c.compress(codec, kind(DATA))
    assert isinstance(packed, bytes)
    if codec != c.NONE:
        assert len(packed) < len(DATA)
    assert c.decompress(codec, kind(packed)) == DATA


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", [b"", b"x", bytes(range(256)) * 3])
def test_round_trip_small(codec, data):
    assert c.decompress(codec, c.compress(codec, data)) == data


@pytest.mark.parametrize("codec, level", [(c.GZIP, 1), (c.GZIP, 9), (c.LZ4, 9), (c.ZSTD, 1), (c.ZSTD, 19)])
def test_levels(codec, level):
    assert c.decompress(codec, c.compress(codec, DATA, level)) == DATA


# --- gzip


def test_gzip_interop_with_stdlib():
    assert gzip.decompress(c.compress(c.GZIP, DATA)) == DATA
    assert c.decompress(c.GZIP, gzip.compress(DATA)) == DATA


def test_gzip_concatenated_members_and_trailing_bytes():
    payload = gzip.compress(b"abc") + gzip.compress(b"def") + b"\x00\x00"
    assert c.decompress(c.GZIP, payload) == b"abcdef"


# --- snappy


def _xerial(data: bytes, block: int) -> bytes:
    """Java's SnappyOutputStream framing, written out by hand from its spec."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(data), block):
        raw = bytes(cramjam.snappy.compress_raw(data[i:i + block]))
        out += struct.pack(">i", len(raw)) + raw
    return bytes(out)


def test_snappy_writes_raw_by_default():
    packed = c.compress(c.SNAPPY, DATA)
    assert not packed.startswith(b"\x82SNAPPY")
    assert bytes(cramjam.snappy.decompress_raw(packed)) == DATA


@pytest.mark.parametrize("block", [1024, 32 * 1024, 1 << 20])
def test_snappy_reads_xerial(block):
    assert c.decompress(c.SNAPPY, _xerial(DATA, block)) == DATA


def test_snappy_xerial_version_fields_ignored():
    # Some writers put version/compat in little-endian.
    framed = bytearray(_xerial(DATA, 32 * 1024))
    framed[8:16] = struct.pack("<ii", 1, 1)
    assert c.decompress(c.SNAPPY, bytes(framed)) == DATA


def test_snappy_writes_xerial():
    packed = c.compress(c.SNAPPY, DATA, xerial=True)
    assert packed == _xerial(DATA, 32 * 1024)
    assert c.snappy_xerial_compress(DATA, 1000) == _xerial(DATA, 1000)
    assert c.decompress(c.SNAPPY, packed) == DATA


def test_snappy_xerial_readable_by_kafka_python(monkeypatch):
    import kafka.codec

    # kafka-python does the xerial framing itself; it only needs raw snappy underneath.
    shim = types.SimpleNamespace(
        compress=lambda b: bytes(cramjam.snappy.compress_raw(b)),
        decompress=lambda b: bytes(cramjam.snappy.decompress_raw(b)),
    )
    monkeypatch.setattr(kafka.codec, "snappy", shim)
    assert kafka.codec.snappy_decode(c.compress(c.SNAPPY, DATA, xerial=True)) == DATA
    assert c.decompress(c.SNAPPY, kafka.codec.snappy_encode(DATA)) == DATA


@pytest.mark.parametrize("cut", [17, 18, 100])
def test_snappy_xerial_truncated(cut):
    framed = _xerial(DATA, 32 * 1024)
    with pytest.raises(CorruptRecordError):
        c.decompress(c.SNAPPY, framed[:cut])


def test_snappy_xerial_bad_block_length():
    framed = bytearray(_xerial(DATA, 32 * 1024))
    framed[16:20] = struct.pack(">i", -5)
    with pytest.raises(CorruptRecordError):
        c.decompress(c.SNAPPY, bytes(framed))


# --- lz4


def test_lz4_frame_is_what_java_accepts():
    packed = c.compress(c.LZ4, DATA)
    info = lz4.frame.get_frame_info(packed)
    assert info["block_linked"] is False  # Java rejects dependent blocks
    assert info["content_checksum"] is False
    assert info["block_size"] == 64 * 1024
    assert lz4.frame.decompress(packed) == DATA


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"block_linked": False},
        {"block_linked": False, "store_size": False},
        {"content_checksum": True, "block_checksum": True},
        {"block_size": lz4.frame.BLOCKSIZE_MAX4MB},
        {"compression_level": 9},
    ],
)
def test_lz4_reads_lz4_frame_output(options):
    assert c.decompress(c.LZ4, lz4.frame.compress(DATA, **options)) == DATA


def test_lz4_concatenated_frames():
    assert c.decompress(c.LZ4, lz4.frame.compress(b"abc") + lz4.frame.compress(b"def")) == b"abcdef"


# --- zstd


def test_zstd_interop_with_zstandard():
    assert zstandard.ZstdDecompressor().decompress(c.compress(c.ZSTD, DATA)) == DATA
    assert c.decompress(c.ZSTD, zstandard.ZstdCompressor(level=3).compress(DATA)) == DATA


def test_zstd_reads_streamed_frame_without_content_size():
    out = io.BytesIO()
    with zstandard.ZstdCompressor().stream_writer(out, closefd=False) as w:
        for i in range(0, len(DATA), 1000):
            w.write(DATA[i:i + 1000])
    framed = out.getvalue()
    assert zstandard.get_frame_parameters(framed).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert c.decompress(c.ZSTD, framed) == DATA


def test_zstd_concatenated_frames():
    z = zstandard.ZstdCompressor()
    assert c.decompress(c.ZSTD, z.compress(b"abc") + z.compress(b"def")) == b"abcdef"


# --- corruption


@pytest.mark.parametrize("codec", COMPRESSED)
def test_truncated_payload(codec):
    packed = c.compress(codec, DATA)
    for cut in (len(packed) // 2, len(packed) - 1):
        with pytest.raises(CorruptRecordError, match="invalid .* compressed records"):
            c.decompress(codec, packed[:cut])


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_payload(codec):
    with pytest.raises(CorruptRecordError):
        c.decompress(codec, b"\xff" * 64)


@pytest.mark.parametrize("codec", [c.GZIP, c.LZ4, c.ZSTD])
def test_empty_payload(codec):
    with pytest.raises(CorruptRecordError):
        c.decompress(codec, b"")


@pytest.mark.parametrize("codec", [c.GZIP, c.LZ4])
def test_flipped_byte_caught_by_codec_checksum(codec):
    # gzip carries a CRC32 of the content, our lz4 frames a checksum per block.
    packed = bytearray(c.compress(codec, DATA))
    packed[len(packed) // 2] ^= 0x55
    with pytest.raises(CorruptRecordError):
        c.decompress(codec, bytes(packed))
