"""Built-in serializers produce Java's bytes and read them back."""

from __future__ import annotations

import time

import pytest

import samsa.embedded
from samsa import serialization as s
from samsa.client.consumer import Consumer
from samsa.client.producer import Producer
from samsa.client.types import TopicPartition


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


class TwoArgumentSerializer:
    """Written to Kafka's contract serialize(topic, data): no headers parameter."""

    def __init__(self):
        self.closed = False

    def serialize(self, topic, data):
        return None if data is None else f"{topic}:{data}".upper().encode()

    def close(self):
        self.closed = True


class TwoArgumentDeserializer:
    def deserialize(self, topic, data):
        return None if data is None else data.decode().lower()


def test_two_argument_serde_through_a_real_broker():
    """Samsa calls (topic, data, headers); a (topic, data) plugin is adapted, as Java's default method does."""
    key_ser = TwoArgumentSerializer()
    with samsa.embedded.Broker() as broker:
        with Producer({"bootstrap.servers": broker.bootstrap_servers, "key.serializer": key_ser,
                       "value.serializer": TwoArgumentSerializer}) as p:
            p.send("two-args", "v", key="k", headers={"h": b"1"}).result(20)
        assert key_ser.closed  # close() and the rest of the plugin still reach it
        with Consumer({"bootstrap.servers": broker.bootstrap_servers, "auto.offset.reset": "earliest",
                       "key.deserializer": TwoArgumentDeserializer,
                       "value.deserializer": f"{__name__}.TwoArgumentDeserializer"}) as c:
            c.assign([TopicPartition("two-args", 0)])
            records = []
            deadline = time.monotonic() + 30
            while not records and time.monotonic() < deadline:
                records = c.poll(0.5)
    assert (records[0].key, records[0].value) == ("two-args:k", "two-args:v")


def test_three_argument_serde_is_called_with_headers():
    seen = []

    class WithHeaders:
        def serialize(self, topic, data, headers):
            seen.append(headers)
            return data.encode()

    assert s.with_headers(WithHeaders(), "serialize").serialize("t", "x", {"h": 1}) == b"x" and seen == [{"h": 1}]
    assert type(s.with_headers(s.StringSerializer(), "serialize")) is s.StringSerializer
