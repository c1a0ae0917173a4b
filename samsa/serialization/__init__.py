"""Serializers and deserializers, with the byte formats of Kafka's Java built-ins.

A serializer has ``serialize(topic, data, headers=None) -> bytes | None``, and optionally
``configure(configs)`` and ``close()``; a deserializer mirrors it with ``deserialize``.
``None`` stays ``None`` (a null key or value), as in Java. One written to Kafka's
two-argument contract, ``serialize(topic, data)`` (Java's method without headers,
kafka-python's ``serialize(topic, value)``), works too: :func:`with_headers` adapts it,
as Java's default three-argument method calls the two-argument one.
"""

from __future__ import annotations

import inspect
import json
import struct
from typing import Any, Protocol


# Keys the Schema Registry serdes (samsa.serialization.avro, json_schema, protobuf) read from the
# client's configs: a client given them logs no "isn't a known config" warning, as Java's does not
# for keys its serializers use.
SERDE_KEYS = frozenset({
    "schema.registry.url", "basic.auth.credentials.source", "basic.auth.user.info", "auto.register.schemas",
    "use.latest.version", "normalize.schemas", "key.subject.name.strategy", "value.subject.name.strategy",
    "key.schema", "value.schema", "key.reader.schema", "value.reader.schema", "json.fail.invalid.schema",
    "skip.known.types", "specific.protobuf.key.type", "specific.protobuf.value.type", "print.schema.ids",
    "schema.id.separator",
})


class SerializationError(Exception):
    """A serializer or deserializer failed; the original exception is the cause."""


class Serializer(Protocol):
    def serialize(self, topic: str, data: Any, headers: Any = None) -> bytes | None: ...


class Deserializer(Protocol):
    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> Any: ...


class _Configurable:
    def configure(self, configs: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


class BytesSerializer(_Configurable):
    def serialize(self, topic: str, data: bytes | None, headers: Any = None) -> bytes | None:
        return None if data is None else bytes(data)


class BytesDeserializer(_Configurable):
    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> bytes | None:
        return data


class StringSerializer(_Configurable):
    """UTF-8 unless ``key.serializer.encoding`` / ``value.serializer.encoding`` /
    ``serializer.encoding`` says otherwise, as Java's StringSerializer."""

    encoding = "utf-8"

    def __init__(self, encoding: str | None = None, is_key: bool = False):
        if encoding:
            self.encoding = encoding
        self.is_key = is_key

    def configure(self, configs: dict[str, Any]) -> None:
        side = "key" if self.is_key else "value"
        self.encoding = configs.get(f"{side}.serializer.encoding") or configs.get("serializer.encoding") or self.encoding

    def serialize(self, topic: str, data: str | None, headers: Any = None) -> bytes | None:
        return None if data is None else data.encode(self.encoding)


class StringDeserializer(StringSerializer):
    def configure(self, configs: dict[str, Any]) -> None:
        side = "key" if self.is_key else "value"
        self.encoding = (configs.get(f"{side}.deserializer.encoding") or configs.get("deserializer.encoding")
                         or self.encoding)

    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> str | None:
        return None if data is None else bytes(data).decode(self.encoding)


def _fixed(name: str, fmt: str, java: str) -> tuple[type, type]:
    s = struct.Struct(">" + fmt)

    class Ser(_Configurable):
        def serialize(self, topic: str, data: Any, headers: Any = None) -> bytes | None:
            return None if data is None else s.pack(data)

    class De(_Configurable):
        def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> Any:
            if data is None:
                return None
            if len(data) != s.size:
                raise SerializationError(f"Size of data received by {java}Deserializer is not {s.size}")
            return s.unpack(data)[0]

    Ser.__name__, Ser.__qualname__ = f"{name}Serializer", f"{name}Serializer"
    De.__name__, De.__qualname__ = f"{name}Deserializer", f"{name}Deserializer"
    Ser.__doc__ = f"Java's {java}Serializer: big-endian, {s.size} bytes."
    De.__doc__ = f"Java's {java}Deserializer."
    return Ser, De


IntegerSerializer, IntegerDeserializer = _fixed("Integer", "i", "Integer")
LongSerializer, LongDeserializer = _fixed("Long", "q", "Long")
ShortSerializer, ShortDeserializer = _fixed("Short", "h", "Short")
FloatSerializer, FloatDeserializer = _fixed("Float", "f", "Float")
DoubleSerializer, DoubleDeserializer = _fixed("Double", "d", "Double")


class JSONSerializer(_Configurable):
    def serialize(self, topic: str, data: Any, headers: Any = None) -> bytes | None:
        return None if data is None else json.dumps(data, separators=(",", ":")).encode()


class JSONDeserializer(_Configurable):
    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> Any:
        return None if data is None else json.loads(data)


def default_serialize(data: Any) -> bytes | None:
    """Without a serializer: bytes pass through, str is UTF-8, anything else is an error."""
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode()
    raise SerializationError(f"no serializer configured for a value of type {type(data).__name__}")


class _WithoutHeaders:
    """A (de)serializer whose method takes (topic, data): called without the headers."""

    def __init__(self, plugin: Any, method: str):
        self.plugin, self._fn = plugin, getattr(plugin, method)
        setattr(self, method, self._call)

    def _call(self, topic: str, data: Any, headers: Any = None) -> Any:
        return self._fn(topic, data)

    def __getattr__(self, name: str) -> Any:  # configure, close, anything else of the plugin's
        return getattr(self.plugin, name)


def with_headers(plugin: Any, method: str) -> Any:
    """``plugin`` if its ``method`` takes headers, else an adapter whose ``method`` does."""
    try:
        params = inspect.signature(getattr(plugin, method)).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: assume the full contract
        return plugin
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL or p.name == "headers" for p in params):
        return plugin
    return _WithoutHeaders(plugin, method)
