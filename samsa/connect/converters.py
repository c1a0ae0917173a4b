"""Converters between Connect data and record bytes: JsonConverter, StringConverter, ByteArrayConverter,
and with a Schema Registry (``schema.registry.url``) Confluent's AvroConverter and JsonSchemaConverter."""

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


# ---------------------------------------------------------------- with a Schema Registry

DECIMAL = "org.apache.kafka.connect.data.Decimal"
_AVRO_PRIMITIVES = {"int8": "int", "int16": "int", "int32": "int", "int64": "long", "float32": "float",
                    "float64": "double", "boolean": "boolean", "string": "string", "bytes": "bytes"}
_AVRO_NS = "io.confluent.connect.avro"


def _avro_name(name: str | None, defined: set[str], counter: list[int]) -> str:
    if not name:
        counter[0] += 1
        name = f"{_AVRO_NS}.ConnectDefault" + ("" if counter[0] == 1 else str(counter[0]))
    return "".join(c if c.isalnum() or c in "._" else "_" for c in name)


def connect_to_avro(schema: Schema, defined: set[str] | None = None, counter: list[int] | None = None) -> Any:
    """A Connect schema as an Avro schema, as Confluent's AvroData writes it (optional: a union with
    null; names, versions, parameters and int8/int16 in ``connect.*`` properties; Decimal as the
    ``decimal`` logical type)."""
    defined = set() if defined is None else defined
    counter = [0] if counter is None else counter
    t = schema.type
    out: Any
    if t == "struct":
        name = _avro_name(schema.name, defined, counter)
        if name in defined:
            out = name
        else:
            defined.add(name)
            fields = []
            for f in schema.fields or []:
                fs = connect_to_avro(f.schema, defined, counter)
                field: dict[str, Any] = {"name": f.name, "type": fs}
                if f.schema.optional and f.schema.default is None:
                    field["default"] = None
                elif f.schema.default is not None:
                    field["default"] = f.schema.default
                fields.append(field)
            out = {"type": "record", "name": name, "fields": fields}
            if schema.name:
                out["connect.name"] = schema.name
            if schema.version is not None:
                out["connect.version"] = schema.version
            if schema.doc:
                out["doc"] = schema.doc
    elif t == "array":
        out = {"type": "array", "items": connect_to_avro(schema.items, defined, counter)}
    elif t == "map":
        if schema.keys is not None and schema.keys.type != "string":
            entry = Schema("struct", False, f"{_AVRO_NS}.MapEntry", fields=[
                _field("key", schema.keys), _field("value", schema.values)])
            out = {"type": "array", "items": connect_to_avro(entry, defined, counter)}
        else:
            out = {"type": "map", "values": connect_to_avro(schema.values, defined, counter)}
    elif schema.name == DECIMAL:
        params = schema.parameters or {}
        out = {"type": "bytes", "logicalType": "decimal", "scale": int(params.get("scale", 0)),
               "precision": int(params.get("connect.decimal.precision", 64)),
               "connect.name": DECIMAL, "connect.parameters": params}
        if schema.version is not None:
            out["connect.version"] = schema.version
    elif t in _AVRO_PRIMITIVES:
        extra: dict[str, Any] = {}
        if t in ("int8", "int16"):
            extra["connect.type"] = t
        if schema.name:
            extra["connect.name"] = schema.name
        if schema.version is not None:
            extra["connect.version"] = schema.version
        if schema.parameters:
            extra["connect.parameters"] = schema.parameters
        out = {"type": _AVRO_PRIMITIVES[t], **extra} if extra else _AVRO_PRIMITIVES[t]
    else:
        raise DataException(f"Unknown schema type: {t}")
    if schema.optional:
        return ["null", out] if schema.default is None else [out, "null"]
    return out


def _field(name: str, schema: Schema | None) -> Any:
    from samsa.connect.data import Field
    return Field(name, schema or OPTIONAL_STRING_SCHEMA)


def avro_to_connect(avro: Any, optional: bool = False, named: dict | None = None) -> Schema:
    """The Connect schema of an Avro schema (the reverse of :func:`connect_to_avro`)."""
    from samsa.connect.data import Field
    named = {} if named is None else named
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) == 1:
            return avro_to_connect(branches[0], optional or len(branches) < len(avro), named)
        raise DataException(f"Avro unions other than with null are not supported: {avro}")
    if isinstance(avro, str):
        if avro in named:
            s = named[avro]
            return Schema(s.type, optional, s.name, s.version, s.doc, s.default, s.parameters, s.fields, s.items,
                          s.keys, s.values)
        avro = {"type": avro}
    t = avro["type"]
    if isinstance(t, (dict, list)):
        return avro_to_connect(t, optional, named)
    name, version, params = avro.get("connect.name"), avro.get("connect.version"), avro.get("connect.parameters")
    if t == "record":
        s = Schema("struct", optional, name or (None if avro["name"].startswith(_AVRO_NS) else avro["name"]),
                   version, avro.get("doc"))
        named[avro["name"]] = s
        s.fields = []
        for f in avro["fields"]:
            fs = avro_to_connect(f["type"], False, named)
            if f.get("default") is not None:
                fs.default = f["default"]
            s.fields.append(Field(f["name"], fs))
        return s
    if t == "array":
        return Schema("array", optional, items=avro_to_connect(avro["items"], False, named))
    if t == "map":
        return Schema("map", optional, keys=Schema("string"), values=avro_to_connect(avro["values"], False, named))
    if avro.get("logicalType") == "decimal":
        return Schema("bytes", optional, DECIMAL, version, parameters=params or {"scale": str(avro.get("scale", 0))})
    if t == "enum":
        return Schema("string", optional, name)
    kinds = {"int": avro.get("connect.type", "int32"), "long": "int64", "float": "float32", "double": "float64",
             "boolean": "boolean", "string": "string", "bytes": "bytes", "fixed": "bytes"}
    if t not in kinds:
        raise DataException(f"Unsupported Avro type {t}")
    return Schema(kinds[t], optional, name, version, parameters=params)


def _from_avro_value(schema: Schema | None, value: Any) -> Any:
    import decimal
    if value is None or schema is None:
        return value
    if isinstance(value, decimal.Decimal):   # fastavro's decimal: back to Connect's unscaled bytes
        scale = int((schema.parameters or {}).get("scale", 0))
        unscaled = int(value.scaleb(scale).to_integral_value())
        return unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
    if schema.type == "struct" and isinstance(value, dict):
        return {f.name: _from_avro_value(f.schema, value.get(f.name)) for f in schema.fields or []}
    if schema.type == "array":
        return [_from_avro_value(schema.items, v) for v in value]
    if schema.type == "map":
        return {k: _from_avro_value(schema.values, v) for k, v in value.items()}
    return value


def _to_avro_value(schema: Schema | None, value: Any) -> Any:
    if value is None or schema is None:
        return value
    if schema.type == "struct":
        return {f.name: _to_avro_value(f.schema, value.get(f.name)) for f in schema.fields or []}
    if schema.type == "array":
        return [_to_avro_value(schema.items, v) for v in value]
    if schema.type == "map":
        if schema.keys is not None and schema.keys.type != "string":
            return [{"key": k, "value": _to_avro_value(schema.values, v)} for k, v in value.items()]
        return {k: _to_avro_value(schema.values, v) for k, v in value.items()}
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    return value


class _RegistryConverter(Converter):
    """``schema.registry.url`` and the serdes' keys (auto.register.schemas, use.latest.version,
    key/value.subject.name.strategy, basic.auth.*) from the converter's configs."""

    def configure(self, configs: dict[str, Any], is_key: bool) -> None:
        if not configs.get("schema.registry.url"):
            from samsa.connect.errors import ConnectException
            raise ConnectException("Missing required configuration \"schema.registry.url\" which has no default value.")
        self.configs, self.is_key = dict(configs), is_key
        self._serializers: dict[str, Any] = {}
        self._deserializer = self._make_deserializer()

    # What each format gives: its name in messages, the registry schema of a Connect schema and
    # back, a serializer for one registry schema, and values converted both ways.
    FORMAT = ""

    def _make_deserializer(self) -> Any:
        raise NotImplementedError

    def _registry_schema(self, schema: Schema) -> Any:
        raise NotImplementedError

    def _serializer(self, registry_schema: Any) -> Any:
        raise NotImplementedError

    def _to_value(self, schema: Schema, value: Any) -> Any:
        raise NotImplementedError

    def _connect_schema(self, registry_schema: Any) -> Schema:
        raise NotImplementedError

    def _from_value(self, schema: Schema, datum: Any) -> Any:
        raise NotImplementedError

    def from_connect_data(self, topic: str, schema: Schema | None, value: Any) -> bytes | None:
        from samsa.serialization import SerializationError
        if value is None:
            return None
        if schema is None:
            raise DataException(f"{type(self).__name__} needs a schema: schemaless values cannot be written "
                                f"as {self.FORMAT}")
        registry_schema = self._registry_schema(schema)
        key = json.dumps(registry_schema, sort_keys=True)
        ser = self._serializers.get(key)
        if ser is None:
            ser = self._serializers[key] = self._serializer(registry_schema)
        try:
            return ser.serialize(topic, self._to_value(schema, value))
        except SerializationError as e:
            raise DataException(f"Failed to serialize {self.FORMAT} data from topic {topic}: {e}") from e

    def to_connect_data(self, topic: str, value: bytes | None) -> tuple[Schema | None, Any]:
        from samsa.serialization import SerializationError
        from samsa.serialization.schema_registry import unframe
        if value is None:
            return None, None
        try:
            datum = self._deserializer.deserialize(topic, value)
            schema_id, _ = unframe(value)
            found = self._deserializer.writer_schema(schema_id, topic)
        except SerializationError as e:
            raise DataException(f"Failed to deserialize data for topic {topic} to {self.FORMAT}: {e}") from e
        schema = self._connect_schema(json.loads(found["schema"]))
        return schema, self._from_value(schema, datum)


class AvroConverter(_RegistryConverter):
    """``io.confluent.connect.avro.AvroConverter``: Connect data as Avro in Confluent's wire format."""

    FORMAT = "Avro"

    def _make_deserializer(self) -> Any:
        from samsa.serialization.avro import KafkaAvroDeserializer
        return KafkaAvroDeserializer(conf=self.configs, is_key=self.is_key)

    def _registry_schema(self, schema: Schema) -> Any:
        return connect_to_avro(schema)

    def _serializer(self, registry_schema: Any) -> Any:
        from samsa.serialization.avro import KafkaAvroSerializer
        return KafkaAvroSerializer(registry_schema, self.configs, self.is_key)

    def _to_value(self, schema: Schema, value: Any) -> Any:
        return _to_avro_value(schema, value)

    def _connect_schema(self, registry_schema: Any) -> Schema:
        return avro_to_connect(registry_schema)

    def _from_value(self, schema: Schema, datum: Any) -> Any:
        return _from_avro_value(schema, datum)


_JSON_TYPES = {"int8": "integer", "int16": "integer", "int32": "integer", "int64": "integer", "float32": "number",
               "float64": "number", "boolean": "boolean", "string": "string", "bytes": "string"}


def connect_to_json_schema(schema: Schema) -> dict:
    """A Connect schema as a JSON Schema, as Confluent's JsonSchemaData writes it (``connect.*`` properties)."""
    t = schema.type
    if t == "struct":
        out: dict[str, Any] = {"type": "object", "properties": {
            f.name: {**connect_to_json_schema(f.schema), "connect.index": i} for i, f in enumerate(schema.fields or [])}}
        if schema.name:
            out["title"] = schema.name
    elif t == "array":
        out = {"type": "array", "items": connect_to_json_schema(schema.items)}
    elif t == "map":
        out = {"type": "object", "connect.type": "map",
               "additionalProperties": connect_to_json_schema(schema.values)}
    elif t in _JSON_TYPES:
        out = {"type": _JSON_TYPES[t], "connect.type": t}
        if schema.name:
            out["title"] = schema.name
        if schema.parameters:
            out["connect.parameters"] = schema.parameters
    else:
        raise DataException(f"Unknown schema type: {t}")
    if schema.version is not None:
        out["connect.version"] = schema.version
    if schema.default is not None:
        out["default"] = to_json_value(schema, schema.default)
    if schema.optional:
        return {"oneOf": [{"type": "null"}, out]}
    return out


def json_schema_to_connect(js: Any, optional: bool = False) -> Schema:
    from samsa.connect.data import Field
    if js is True or js == {}:
        return Schema("string", True)
    if "oneOf" in js or "anyOf" in js:
        branches = [b for b in js.get("oneOf", js.get("anyOf")) if b.get("type") != "null"]
        if len(branches) == 1:
            return json_schema_to_connect(branches[0], True)
        raise DataException(f"JSON schema unions other than with null are not supported: {js}")
    t, ctype = js.get("type"), js.get("connect.type")
    if t == "object" and ctype != "map":
        fields = sorted(js.get("properties", {}).items(), key=lambda kv: kv[1].get("connect.index", 0))
        return Schema("struct", optional, js.get("title"), js.get("connect.version"),
                      fields=[Field(k, json_schema_to_connect(v)) for k, v in fields])
    if t == "object":
        return Schema("map", optional, keys=Schema("string"), values=json_schema_to_connect(
            js.get("additionalProperties", {})))
    if t == "array":
        return Schema("array", optional, items=json_schema_to_connect(js.get("items", {})))
    kind = ctype or {"integer": "int64", "number": "float64", "boolean": "boolean", "string": "string"}.get(t)
    if kind is None:
        raise DataException(f"Unsupported JSON schema type {t}")
    return Schema(kind, optional, js.get("title"), js.get("connect.version"), parameters=js.get("connect.parameters"))


class JsonSchemaConverter(_RegistryConverter):
    """``io.confluent.connect.json.JsonSchemaConverter``: Connect data as JSON with a registered JSON Schema."""

    FORMAT = "JSON"

    def _make_deserializer(self) -> Any:
        from samsa.serialization.json_schema import KafkaJsonSchemaDeserializer
        return KafkaJsonSchemaDeserializer(conf=self.configs, is_key=self.is_key)

    def _registry_schema(self, schema: Schema) -> Any:
        return connect_to_json_schema(schema)

    def _serializer(self, registry_schema: Any) -> Any:
        from samsa.serialization.json_schema import KafkaJsonSchemaSerializer
        return KafkaJsonSchemaSerializer(registry_schema, self.configs, self.is_key)

    def _to_value(self, schema: Schema, value: Any) -> Any:
        return to_json_value(schema, value)

    def _connect_schema(self, registry_schema: Any) -> Schema:
        return json_schema_to_connect(registry_schema)

    def _from_value(self, schema: Schema, datum: Any) -> Any:
        return from_json_value(schema, datum)


ALIASES = {
    "io.confluent.connect.avro.AvroConverter": AvroConverter,
    "io.confluent.connect.json.JsonSchemaConverter": JsonSchemaConverter,
    "org.apache.kafka.connect.json.JsonConverter": JsonConverter,
    "org.apache.kafka.connect.storage.StringConverter": StringConverter,
    "org.apache.kafka.connect.converters.ByteArrayConverter": ByteArrayConverter,
}
