"""Built-in serializers produce Java's bytes and read them back."""

from __future__ import annotations

import pytest

from samsa import serialization as s


@pytest.mark.parametrize("ser,de,value,raw", [
    (s.IntegerSerializer, s.IntegerDeserializer, -2, b"\xff\xff\xff\xfe"),
    (s.LongSerializer, s.LongDeserializer, 1, b"\x00" * 7 + b"\x01"),
    (s.ShortSerializer, s.ShortDeserializer, 258, b"\x01\x02"),
    (s.FloatSerializer, s.FloatDeserializer, 1.5, b"\x3f\xc0\x00\x00"),
    (s.DoubleSerializer, s.DoubleDeserializer, -2.0, b"\xc0\x00\x00\x00\x00\x00\x00\x00"),
    (s.StringSerializer, s.StringDeserializer, "héllo", "héllo".encode()),
    (s.BytesSerializer, s.BytesDeserializer, b"\x00\x01", b"\x00\x01"),
    (s.JSONSerializer, s.JSONDeserializer, {"a": [1, 2]}, b'{"a":[1,2]}'),
])
def test_round_trip_in_java_format(ser, de, value, raw):
    assert ser().serialize("t", value) == raw
    assert de().deserialize("t", raw) == value
    assert ser().serialize("t", None) is None and de().deserialize("t", None) is None


def test_string_encoding_from_configs():
    ser = s.StringSerializer(is_key=True)
    ser.configure({"key.serializer.encoding": "utf-16-be"})
    assert ser.serialize("t", "A") == b"\x00A"
    de = s.StringDeserializer()
    de.configure({"deserializer.encoding": "latin-1"})
    assert de.deserialize("t", b"\xe9") == "é"


def test_wrong_size_is_a_clear_error():
    with pytest.raises(s.SerializationError, match="is not 4"):
        s.IntegerDeserializer().deserialize("t", b"\x00\x01")


def test_defaults_without_a_serializer():
    assert s.default_serialize(b"x") == b"x" and s.default_serialize("é") == "é".encode()
    assert s.default_serialize(None) is None
    with pytest.raises(s.SerializationError):
        s.default_serialize(3)
