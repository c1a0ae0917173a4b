"""Converters between Connect data and record bytes: JsonConverter, StringConverter, ByteArrayConverter."""

from __future__ import annotations

import base64
import json
from typing import Any

from samsa.connect.data import OPTIONAL_BYTES_SCHEMA, OPTIONAL_STRING_SCHEMA, Schema
from samsa.connect.errors import DataException


def _bool(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).strip().lower() == "true"


class Converter:
    """Kafka's Converter interface."""

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        pass

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        raise NotImplementedError

    def to_connect_data(self, topic: str, value: bytes | None) -> tuple[Schema | None, Any]:
        raise NotImplementedError


class StringConverter(Converter):
    encoding = "utf-8"

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        self.encoding = configs.get("converter.encoding", configs.get("serializer.encoding", "utf-8"))

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray)):
            return bytes(value)
        return (value if isinstance(value, str) else _to_text(value)).encode(self.encoding)

    def to_connect_data(self, topic: str, value: bytes | None) -> tuple[Schema | None, Any]:
        return OPTIONAL_STRING_SCHEMA, None if value is None else value.decode(self.encoding, errors="replace")


def _to_text(value: Any) -> str:
    """Java's toString() of a struct or collection is not JSON; JSON is the useful choice."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class ByteArrayConverter(Converter):
    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if value is None:
            return None
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise DataException(f"ByteArrayConverter is not compatible with objects of type {type(value).__name__}")
        return bytes(value)

    def to_connect_data(self, topic: str, value: bytes | None) -> tuple[Schema | None, Any]:
        return OPTIONAL_BYTES_SCHEMA, value


class JsonConverter(Converter):
    """JSON, with the ``{"schema": ..., "payload": ...}`` envelope when ``schemas.enable`` (the default)."""

    schemas_enable = True

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        self.schemas_enable = _bool(configs.get("schemas.enable", True))

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        if schema is None and value is None:
            return None
        payload = to_json_value(schema, value)
        doc = {"schema": schema.to_json() if schema else None, "payload": payload} if self.schemas_enable else payload
        return json.dumps(doc, separators=(",", ":")).encode()

    def to_connect_data(self, topic: str, value: bytes | None) -> tuple[Schema | None, Any]:
        if value is None:
            return None, None
        try:
            doc = json.loads(value)
        except ValueError as e:
            raise DataException(f"Converting byte[] to Kafka Connect data failed due to serialization error: {e}") from e
        if not self.schemas_enable:
            return None, doc
        if not isinstance(doc, dict) or set(doc) != {"schema", "payload"}:
            raise DataException('JsonConverter with schemas.enable requires "schema" and "payload" fields and may not '
                                'contain additional fields. If you are trying to deserialize plain JSON data, set '
                                'schemas.enable=false in your converter configuration.')
        if doc["schema"] is None:
            return None, doc["payload"]
        schema = Schema.from_json(doc["schema"])
        return schema, from_json_value(schema, doc["payload"])


def to_json_value(schema: Schema | None, value: Any) -> Any:
    if value is None:
        if schema is not None and not schema.optional and schema.default is None:
            raise DataException("Conversion error: null value for field that is required and has no default value")
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode()
    if isinstance(value, dict):
        if schema is not None and schema.type == "struct":
            return {f.name: to_json_value(f.schema, value.get(f.name)) for f in schema.fields or []}
        vs = schema.values if schema is not None else None
        return {str(k): to_json_value(vs, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        items = schema.items if schema is not None else None
        return [to_json_value(items, v) for v in value]
    return value


def from_json_value(schema: Schema, value: Any) -> Any:
    if value is None:
        return schema.default
    t = schema.type
    if t == "bytes":
        return base64.b64decode(value) if isinstance(value, str) else value
    if t == "struct":
        if not isinstance(value, dict):
            raise DataException(f"Struct payload is not an object: {value!r}")
        return {f.name: from_json_value(f.schema, value.get(f.name)) for f in schema.fields or []}
    if t == "array":
        return [from_json_value(schema.items, v) for v in value] if schema.items else list(value)
    if t == "map":
        return {k: from_json_value(schema.values, v) for k, v in value.items()} if schema.values else dict(value)
    if t in ("int8", "int16", "int32", "int64") and not isinstance(value, int):
        raise DataException(f"Invalid {t} value: {value!r}")
    return value


ALIASES = {
    "org.apache.kafka.connect.json.JsonConverter": JsonConverter,
    "org.apache.kafka.connect.storage.StringConverter": StringConverter,
    "org.apache.kafka.connect.converters.ByteArrayConverter": ByteArrayConverter,
}
