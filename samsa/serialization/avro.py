"""Avro in Confluent's wire format (``io.confluent.kafka.serializers.KafkaAvroSerializer`` and
``KafkaAvroDeserializer``), encoded with fastavro.

The serializer's schema is given as an argument or by ``value.schema`` / ``key.schema`` (as
kafka-avro-console-producer takes it), or is the subject's latest (``use.latest.version``).
A record is a dict (a primitive schema takes the plain value). The deserializer reads with the
writer's schema (found by the record's id), or resolves it to a reader schema when one is
given (``reader_schema`` / ``value.reader.schema``).
"""

from __future__ import annotations

import io
import json
from typing import Any

from samsa.serialization import SerializationError
from samsa.serialization.schema_registry import RegistrySerde, frame, unframe


def _parse(text: str | dict, named: dict | None = None) -> Any:
    import fastavro
    try:
        data = json.loads(text) if isinstance(text, str) else text
        return fastavro.parse_schema(data, named_schemas=named if named is not None else {})
    except (ValueError, TypeError, KeyError, fastavro.schema.SchemaParseException) as e:
        raise SerializationError(f"Invalid Avro schema: {e}") from None


def record_name(schema_text: str) -> str | None:
    data = json.loads(schema_text)
    if isinstance(data, dict) and data.get("type") in ("record", "enum", "fixed"):
        name, ns = data["name"], data.get("namespace")
        return name if "." in name or not ns else f"{ns}.{name}"
    return None


def compact(schema_text: str | dict) -> str:
    return json.dumps(json.loads(schema_text) if isinstance(schema_text, str) else schema_text,
                      separators=(",", ":"))


class _References:
    def _named(self, references: list[dict]) -> dict:
        """fastavro's named types of the schemas ``references`` name (their own references first)."""
        named: dict = {}
        for ref in references or []:
            found = self._registry().version(ref["subject"], ref["version"])
            named.update(self._named(found.get("references") or []))
            _parse(found["schema"], named)
        return named


class KafkaAvroSerializer(RegistrySerde, _References):
    schema_type = "AVRO"

    def __init__(self, schema: str | dict | None = None, conf: dict[str, Any] | None = None, is_key: bool = False,
                 references: list[dict] | None = None):
        self._text = None if schema is None else compact(schema)
        self._references = references or []
        self._parsed: dict[int, Any] = {}
        self._by_topic: dict[str, tuple[int, Any]] = {}
        super().__init__(schema, conf, is_key)

    def configure_type(self, configs: dict[str, Any]) -> None:
        given = configs.get("key.schema" if self.is_key else "value.schema")
        if self._text is None and given:
            self._text = compact(given)

    def serialize(self, topic: str, data: Any, headers: Any = None) -> bytes | None:
        import fastavro
        if data is None:
            return None
        if self._text is None and not self.use_latest:
            raise SerializationError("No Avro schema: give one (value.schema / key.schema) or use.latest.version=true")
        cached = self._by_topic.get(topic)   # the id and parsed schema this topic's records get
        if cached is None:
            request = {"schema": self._text, "references": self._references} if self._text else {}
            schema_id, registered = self.schema_id(topic, record_name(self._text) if self._text else None, request)
            parsed = self._parsed.get(schema_id)
            if parsed is None:
                text = registered.get("schema") or self._text
                parsed = _parse(text, self._named(registered.get("references") or self._references))
                self._parsed[schema_id] = parsed
            cached = self._by_topic[topic] = (schema_id, parsed)
        schema_id, parsed = cached
        out = io.BytesIO()
        try:
            fastavro.schemaless_writer(out, parsed, data)
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise SerializationError(f"Error serializing Avro message: {e}") from None
        return frame(schema_id, out.getvalue())


class KafkaAvroDeserializer(RegistrySerde, _References):
    schema_type = "AVRO"

    def __init__(self, reader_schema: str | dict | None = None, conf: dict[str, Any] | None = None,
                 is_key: bool = False):
        self._reader = None if reader_schema is None else _parse(reader_schema)
        self._writers: dict[int, Any] = {}
        super().__init__(None, conf, is_key)

    def configure_type(self, configs: dict[str, Any]) -> None:
        given = configs.get("key.reader.schema" if self.is_key else "value.reader.schema")
        if self._reader is None and given:
            self._reader = _parse(given)

    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> Any:
        import fastavro
        if data is None:
            return None
        schema_id, body = unframe(bytes(data))
        writer = self._writers.get(schema_id)
        if writer is None:
            found = self.writer_schema(schema_id, topic)
            if (found.get("schemaType") or "AVRO") != "AVRO":
                raise SerializationError(f"Schema id {schema_id} is a {found['schemaType']} schema, not Avro")
            writer = _parse(found["schema"], self._named(found.get("references") or []))
            self._writers[schema_id] = writer
        try:
            return fastavro.schemaless_reader(io.BytesIO(body), writer, self._reader)
        except (ValueError, TypeError, EOFError, IndexError, KeyError, fastavro.read.SchemaResolutionError) as e:
            raise SerializationError(f"Error deserializing Avro message for id {schema_id}: {e}") from None


# ------------------------------------------------------------------ Avro's JSON encoding (the console tools)

def from_avro_json(schema: Any, text: str) -> Any:
    """One datum in Avro's JSON encoding (unions as ``{"type": value}``) under a parsed schema."""
    import fastavro
    try:
        return next(iter(fastavro.json_reader(io.StringIO(text), schema)))
    except StopIteration:
        raise SerializationError("No datum on the line") from None
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
        raise SerializationError(f"Cannot read {text!r} as Avro JSON: {e}") from None


def to_avro_json(schema: Any, datum: Any) -> str:
    import fastavro
    out = io.StringIO()
    fastavro.json_writer(out, schema, [datum])
    return out.getvalue().rstrip("\n")


class AvroLineSerializer(KafkaAvroSerializer):
    """What kafka-avro-console-producer's AvroMessageReader does with a line: Avro JSON in, wire format out."""

    def serialize(self, topic: str, data: Any, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        if self._text is None:
            raise SerializationError("No Avro schema: value.schema (or key.schema) is required")
        text = data.decode() if isinstance(data, (bytes, bytearray)) else str(data)
        named = self._named(self._references)
        return super().serialize(topic, from_avro_json(_parse(self._text, named), text), headers)


class AvroJsonDeserializer(KafkaAvroDeserializer):
    """What kafka-avro-console-consumer's AvroMessageFormatter prints: the datum in Avro JSON
    under the writer's schema (with ``print.schema.ids``, the id after ``schema.id.separator``)."""

    print_ids = False
    id_separator = "\t"

    def configure_type(self, configs: dict[str, Any]) -> None:
        super().configure_type(configs)
        self.print_ids = str(configs.get("print.schema.ids", "false")).lower() == "true"
        self.id_separator = str(configs.get("schema.id.separator", "\t"))

    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> Any:
        if data is None:
            return None
        datum = super().deserialize(topic, data, headers)
        schema_id, _ = unframe(bytes(data))
        text = to_avro_json(self._reader or self._writers[schema_id], datum)
        return text + (f"{self.id_separator}{schema_id}" if self.print_ids else "")
