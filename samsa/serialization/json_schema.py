"""JSON Schema in Confluent's wire format (``io.confluent.kafka.serializers.json.KafkaJsonSchemaSerializer``
and ``KafkaJsonSchemaDeserializer``): the body is the record as UTF-8 JSON, checked against the
schema with ``jsonschema`` (``json.fail.invalid.schema``, true here as in confluent-kafka)."""

from __future__ import annotations

import json
from typing import Any

from samsa.serialization import SerializationError
from samsa.serialization.schema_registry import RegistrySerde, _bool, frame, unframe


def _compact(schema: str | dict) -> str:
    return json.dumps(json.loads(schema) if isinstance(schema, str) else schema, separators=(",", ":"))


def _validate(schema: Any, data: Any) -> None:
    import jsonschema
    try:
        jsonschema.validate(data, schema)
    except jsonschema.ValidationError as e:
        raise SerializationError(f"Validation error: {e.message}") from None


class KafkaJsonSchemaSerializer(RegistrySerde):
    schema_type = "JSON"

    def __init__(self, schema: str | dict | None = None, conf: dict[str, Any] | None = None, is_key: bool = False):
        self._text = None if schema is None else _compact(schema)
        self.validate = True
        super().__init__(schema, conf, is_key)

    def configure_type(self, configs: dict[str, Any]) -> None:
        given = configs.get("key.schema" if self.is_key else "value.schema")
        if self._text is None and given:
            self._text = _compact(given)
        self.validate = _bool(configs.get("json.fail.invalid.schema"), True)

    def serialize(self, topic: str, data: Any, headers: Any = None) -> bytes | None:
        if data is None:
            return None
        if self._text is None and not self.use_latest:
            raise SerializationError("No JSON schema: give one (value.schema / key.schema) or use.latest.version=true")
        doc = json.loads(self._text) if self._text else {}
        title = doc.get("title") if isinstance(doc, dict) else None
        schema_id, registered = self.schema_id(topic, title, {"schemaType": "JSON", "schema": self._text}
                                               if self._text else {})
        if self.validate:
            _validate(json.loads(registered.get("schema") or self._text), data)
        return frame(schema_id, json.dumps(data, separators=(",", ":")).encode())


class KafkaJsonSchemaDeserializer(RegistrySerde):
    schema_type = "JSON"

    def __init__(self, schema: str | dict | None = None, conf: dict[str, Any] | None = None, is_key: bool = False):
        self.validate = True
        super().__init__(schema, conf, is_key)

    def configure_type(self, configs: dict[str, Any]) -> None:
        self.validate = _bool(configs.get("json.fail.invalid.schema"), True)

    def deserialize(self, topic: str, data: bytes | None, headers: Any = None) -> Any:
        if data is None:
            return None
        schema_id, body = unframe(bytes(data))
        try:
            value = json.loads(bytes(body))
        except ValueError as e:
            raise SerializationError(f"Error deserializing JSON message for id {schema_id}: {e}") from None
        if self.validate:
            _validate(json.loads(self.writer_schema(schema_id, topic)["schema"]), value)
        return value
