"""Protobuf in Confluent's wire format (``io.confluent.kafka.serializers.protobuf.KafkaProtobufSerializer``
and ``KafkaProtobufDeserializer``): after the schema id come the message indexes (the path of
the message type in its file: a zig-zag varint count then each index; ``[0]`` as a single 0
byte), then the message. The schema registered is the message's file as a base64
``FileDescriptorProto`` with its imports as references (subject: the imported file's name;
google/protobuf's well-known types are skipped), as confluent-kafka registers it.

The deserializer returns an instance of ``message_type`` (or ``specific.protobuf.value.type``
/ ``specific.protobuf.key.type``, a dotted class name), or else of a class built from the
writer's schema.
"""

from __future__ import annotations

import base64
import importlib
from typing import Any

from samsa.serialization import SerializationError
from samsa.serialization.schema_registry import RegistrySerde, _bool, frame, unframe


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_zigzag(buf: memoryview, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise SerializationError("Truncated message indexes")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def encode_indexes(indexes: list[int]) -> bytes:
    if indexes == [0]:
        return b"\x00"
    return _zigzag(len(indexes)) + b"".join(_zigzag(i) for i in indexes)


def decode_indexes(body: memoryview) -> tuple[list[int], int]:
    count, pos = _read_zigzag(body, 0)
    if count == 0:
        return [0], pos
    out = []
    for _ in range(count):
        i, pos = _read_zigzag(body, pos)
        out.append(i)
    return out, pos


def message_indexes(descriptor: Any) -> list[int]:
    path = []
    d = descriptor
    while d.containing_type is not None:
        path.append(list(d.containing_type.nested_types).index(d))
        d = d.containing_type
    path.append(list(d.file.message_types_by_name.values()).index(d))
    return list(reversed(path))


def _b64(file_descriptor: Any) -> str:
    return base64.standard_b64encode(file_descriptor.serialized_pb).decode("ascii")


def _known(name: str) -> bool:
    return name.startswith("google/protobuf/") or name.startswith("confluent/")


class KafkaProtobufSerializer(RegistrySerde):
    schema_type = "PROTOBUF"

    def __init__(self, message_type: Any = None, conf: dict[str, Any] | None = None, is_key: bool = False):
        self.message_type = message_type
        self.skip_known_types = True
        self._ids: dict[str, tuple[int, list[int]]] = {}
        super().__init__(None, conf, is_key)

    def configure_type(self, configs: dict[str, Any]) -> None:
        self.skip_known_types = _bool(configs.get("skip.known.types"), True)

    def _references(self, file: Any) -> list[dict]:
        refs = []
        for dep in file.dependencies:
            if self.skip_known_types and _known(dep.name):
                continue
            dep_refs = self._references(dep)
            schema = {"schemaType": "PROTOBUF", "schema": _b64(dep), "references": dep_refs}
            reg = self._registry()
            if self.auto_register:
                reg.register(dep.name, schema, self.normalize)
            found = reg.lookup(dep.name, schema, self.normalize)
            refs.append({"name": dep.name, "subject": dep.name, "version": found["version"]})
        return refs

    def serialize(self, topic: str, data: Any, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        descriptor = getattr(data, "DESCRIPTOR", None)
        if descriptor is None:
            raise SerializationError(f"A Protobuf message is expected, not {type(data).__name__}")
        cached = self._ids.get(f"{topic}/{descriptor.full_name}")
        if cached is None:
            schema = {"schemaType": "PROTOBUF", "schema": _b64(descriptor.file),
                      "references": self._references(descriptor.file)}
            schema_id, _ = self.schema_id(topic, descriptor.full_name, schema)
            cached = (schema_id, message_indexes(descriptor))
            self._ids[f"{topic}/{descriptor.full_name}"] = cached
        return frame(cached[0], encode_indexes(cached[1]) + data.SerializeToString())


def _load_class(name: str) -> Any:
    module, _, cls = name.rpartition(".")
    try:
        return getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError, ValueError) as e:
        raise SerializationError(f"Class {name} cannot be found: {e}") from None


class KafkaProtobufDeserializer(RegistrySerde):
    schema_type = "PROTOBUF"

    def __init__(self, message_type: Any = None, conf: dict[str, Any] | None = None, is_key: bool = False):
        self.message_type = message_type
        self._classes: dict[tuple[int, tuple[int, ...]], Any] = {}
        self._pool: Any = None
        super().__init__(None, conf, is_key)

    def configure_type(self, configs: dict[str, Any]) -> None:
        name = configs.get("specific.protobuf.key.type" if self.is_key else "specific.protobuf.value.type")
        if self.message_type is None and name:
            self.message_type = _load_class(str(name))

    def _add_file(self, pool: Any, found: dict) -> Any:
        from google.protobuf import descriptor_pb2
        for ref in found.get("references") or []:
            try:
                pool.FindFileByName(ref["name"])
            except KeyError:
                self._add_file(pool, self._registry().version(ref["subject"], ref["version"]))
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(found["schema"]))
        try:
            return pool.FindFileByName(fdp.name)
        except KeyError:
            return pool.Add(fdp) and pool.FindFileByName(fdp.name)

    def _class(self, schema_id: int, indexes: list[int], topic: str) -> Any:
        key = (schema_id, tuple(indexes))
        cls = self._classes.get(key)
        if cls is None:
            from google.protobuf import descriptor_pool, message_factory
            if self._pool is None:
                self._pool = descriptor_pool.DescriptorPool()
                from google.protobuf import (any_pb2, duration_pb2, empty_pb2, struct_pb2, timestamp_pb2,
                                             wrappers_pb2)
                for m in (any_pb2, duration_pb2, empty_pb2, struct_pb2, timestamp_pb2, wrappers_pb2):
                    self._pool.AddSerializedFile(m.DESCRIPTOR.serialized_pb)
            found = self.writer_schema(schema_id, topic)
            try:
                file = self._add_file(self._pool, found)
            except Exception as e:  # noqa: BLE001 - protobuf's own errors on a bad descriptor
                raise SerializationError(f"Schema id {schema_id} is not a serialized Protobuf file: {e}") from None
            d = list(file.message_types_by_name.values())[indexes[0]]
            for i in indexes[1:]:
                d = d.nested_types[i]
            cls = message_factory.GetMessageClass(d)
            self._classes[key] = cls
        return cls

    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> Any:
        if data is None:
            return None
        schema_id, body = unframe(bytes(data))
        indexes, pos = decode_indexes(body)
        cls = self.message_type or self._class(schema_id, indexes, topic)
        try:
            return cls.FromString(bytes(body[pos:]))
        except Exception as e:  # noqa: BLE001 - protobuf's DecodeError
            raise SerializationError(f"Error deserializing Protobuf message for id {schema_id}: {e}") from None
