"""Connect's data model: schemas, structs (plain dicts) and the records tasks exchange."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

PRIMITIVES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string", "bytes")


@dataclass
class Schema:
    """A Connect schema, as JsonConverter writes it (``type``, ``optional``, ``fields``, ...)."""

    type: str
    optional: bool = False
    name: str | None = None
    version: int | None = None
    doc: str | None = None
    default: Any = None
    parameters: dict[str, str] | None = None
    fields: list["Field"] | None = None     # struct
    items: "Schema | None" = None           # array
    keys: "Schema | None" = None            # map
    values: "Schema | None" = None          # map

    def field(self, name: str) -> "Field | None":
        return next((f for f in self.fields or [] if f.name == name), None)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.type == "struct":
            out["fields"] = [dict(f.schema.to_json(), field=f.name) for f in self.fields or []]
        elif self.type == "array" and self.items is not None:
            out["items"] = self.items.to_json()
        elif self.type == "map" and self.keys is not None and self.values is not None:
            out["keys"], out["values"] = self.keys.to_json(), self.values.to_json()
        out["optional"] = self.optional
        for key in ("name", "version", "doc", "default", "parameters"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        return out

    @classmethod
    def from_json(cls, js: dict[str, Any]) -> "Schema":
        t = js.get("type")
        if not isinstance(t, str):
            raise ValueError(f"Schema must contain 'type' field: {js}")
        s = cls(t, bool(js.get("optional", False)), js.get("name"), js.get("version"), js.get("doc"),
                js.get("default"), js.get("parameters"))
        if t == "struct":
            s.fields = [Field(f["field"], cls.from_json(f)) for f in js.get("fields", [])]
        elif t == "array":
            s.items = cls.from_json(js["items"])
        elif t == "map":
            s.keys, s.values = cls.from_json(js["keys"]), cls.from_json(js["values"])
        elif t not in PRIMITIVES:
            raise ValueError(f"Unknown schema type: {t}")
        return s


@dataclass
class Field:
    name: str
    schema: Schema


def struct(schema_name: str | None, optional: bool = False, /, **fields: Schema) -> Schema:
    return Schema("struct", optional, schema_name, fields=[Field(k, v) for k, v in fields.items()])


STRING_SCHEMA = Schema("string")
OPTIONAL_STRING_SCHEMA = Schema("string", optional=True)
INT64_SCHEMA = Schema("int64")
OPTIONAL_INT64_SCHEMA = Schema("int64", optional=True)
INT32_SCHEMA = Schema("int32")
BYTES_SCHEMA = Schema("bytes")
OPTIONAL_BYTES_SCHEMA = Schema("bytes", optional=True)

Headers = list[tuple[str, bytes | None]]


@dataclass
class ConnectRecord:
    topic: str
    kafka_partition: int | None
    key_schema: Schema | None
    key: Any
    value_schema: Schema | None
    value: Any
    timestamp: int | None = None
    headers: Headers = field(default_factory=list)

    def new_record(self, **changes: Any) -> "ConnectRecord":
        """A copy with some fields changed (what transforms return)."""
        return dataclasses.replace(self, **changes)


@dataclass
class SourceRecord(ConnectRecord):
    source_partition: dict[str, Any] | None = None
    source_offset: dict[str, Any] | None = None


@dataclass
class SinkRecord(ConnectRecord):
    kafka_offset: int = -1
    timestamp_type: str = "CreateTime"
    original_topic: str | None = None
    original_partition: int | None = None
    original_offset: int | None = None
