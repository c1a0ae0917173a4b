"""Single message transforms and predicates, with Kafka's class names and config keys.

A transform is configured with its own keys (``transforms.<alias>.*`` without the prefix)
and returns the record changed, or None to drop it. ``$Key``/``$Value`` variants act on the
key or the value. Struct values are dicts; when a schema is present it is changed to match.
"""

from __future__ import annotations

import re
import time
from typing import Any

from samsa.connect.data import OPTIONAL_INT64_SCHEMA, OPTIONAL_STRING_SCHEMA, ConnectRecord, Field, Schema
from samsa.connect.errors import ConnectException, DataException

PKG = "org.apache.kafka.connect.transforms."


def _required(props: dict[str, Any], key: str) -> str:
    value = props.get(key)
    if value is None or value == "":
        raise ConnectException(f'Missing required configuration "{key}" which has no default value.')
    return str(value)


def _list(value: Any) -> list[str]:
    if value is None:
        return []
    return [x.strip() for x in (value if isinstance(value, list) else str(value).split(",")) if x.strip()]


class Transformation:
    def configure(self, props: dict[str, Any]) -> None:
        pass

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class _KeyOrValue(Transformation):
    """Operates on the key ($Key) or the value ($Value)."""

    on_key = False

    def operand(self, record: ConnectRecord) -> tuple[Schema | None, Any]:
        return (record.key_schema, record.key) if self.on_key else (record.value_schema, record.value)

    def updated(self, record: ConnectRecord, schema: Schema | None, value: Any) -> ConnectRecord:
        if self.on_key:
            return record.new_record(key_schema=schema, key=value)
        return record.new_record(value_schema=schema, value=value)

    def _struct(self, value: Any, purpose: str) -> dict:
        if not isinstance(value, dict):
            raise DataException(f"Only Struct objects supported for [{purpose}], found: "
                                f"{type(value).__name__ if value is not None else 'null'}")
        return value


class InsertField(_KeyOrValue):
    """topic.field, partition.field, offset.field, timestamp.field, static.field + static.value
    (a name ending in ``!`` is required, ``?`` optional, as in Kafka)."""

    def configure(self, props: dict[str, Any]) -> None:
        def spec(key: str) -> tuple[str, bool] | None:
            v = props.get(key)
            if not v:
                return None
            v = str(v)
            if v.endswith("!"):
                return v[:-1], False
            return v.rstrip("?"), True
        self.topic = spec("topic.field")
        self.partition = spec("partition.field")
        self.offset = spec("offset.field")
        self.timestamp = spec("timestamp.field")
        self.static = spec("static.field")
        self.static_value = props.get("static.value")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operand(record)
        if value is None:
            return record  # tombstones pass through
        adds: list[tuple[tuple[str, bool] | None, Schema, Any]] = [
            (self.topic, OPTIONAL_STRING_SCHEMA, record.topic),
            (self.partition, Schema("int32", True), record.kafka_partition),
            (self.offset, OPTIONAL_INT64_SCHEMA, getattr(record, "kafka_offset", None)),
            (self.timestamp, Schema("int64", True, "org.apache.kafka.connect.data.Timestamp", 1), record.timestamp),
            (self.static, OPTIONAL_STRING_SCHEMA, self.static_value)]
        if self.offset is not None and not hasattr(record, "kafka_offset"):
            raise DataException("Only SinkRecords have an offset: offset.field is for sink connectors")
        out = dict(self._struct(value, "field insertion"))
        new_schema = schema
        if schema is not None:
            new_schema = Schema("struct", schema.optional, schema.name, schema.version, schema.doc,
                                fields=list(schema.fields or []))
        for spec, field_schema, field_value in adds:
            if spec is None:
                continue
            name, _optional = spec
            out[name] = field_value
            if new_schema is not None and new_schema.field(name) is None:
                new_schema.fields.append(Field(name, field_schema))
        return self.updated(record, new_schema, out)


class ReplaceField(_KeyOrValue):
    """exclude (blacklist), include (whitelist), renames (``old:new,...``)."""

    def configure(self, props: dict[str, Any]) -> None:
        self.exclude = set(_list(props.get("exclude", props.get("blacklist"))))
        self.include = set(_list(props.get("include", props.get("whitelist"))))
        self.renames: dict[str, str] = {}
        for pair in _list(props.get("renames")):
            old, sep, new = pair.partition(":")
            if not sep or not old or not new:
                raise ConnectException(f"Invalid value {pair} for configuration renames: "
                                       f"Invalid rename mapping: {pair}")
            self.renames[old] = new

    def _keep(self, name: str) -> bool:
        return name not in self.exclude and (not self.include or name in self.include)

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operand(record)
        if value is None:
            return record
        value = self._struct(value, "field replacement")
        out = {self.renames.get(k, k): v for k, v in value.items() if self._keep(k)}
        new_schema = schema
        if schema is not None:
            new_schema = Schema("struct", schema.optional, schema.name, schema.version, schema.doc,
                                fields=[Field(self.renames.get(f.name, f.name), f.schema)
                                        for f in schema.fields or [] if self._keep(f.name)])
        return self.updated(record, new_schema, out)


class ValueToKey(Transformation):
    """The key becomes a struct of the named value ``fields``."""

    def configure(self, props: dict[str, Any]) -> None:
        self.fields = _list(_required(props, "fields"))

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.value is None:
            return record
        if not isinstance(record.value, dict):
            raise DataException("Only Map or Struct objects supported for [copying fields from value to key]")
        missing = [f for f in self.fields if f not in record.value]
        if missing and record.value_schema is not None:
            raise DataException(f"Field does not exist: {missing[0]}")
        key = {f: record.value.get(f) for f in self.fields}
        key_schema = None
        if record.value_schema is not None:
            key_schema = Schema("struct", fields=[Field(f, record.value_schema.field(f).schema) for f in self.fields])
        return record.new_record(key_schema=key_schema, key=key)


class ExtractField(_KeyOrValue):
    """The key or value becomes one of its fields (``field``)."""

    def configure(self, props: dict[str, Any]) -> None:
        self.field = _required(props, "field")

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        schema, value = self.operand(record)
        if value is None:
            return record
        if not isinstance(value, dict):
            raise DataException(f"Only Map or Struct objects supported for [field extraction], "
                                f"found: {type(value).__name__}")
        f = schema.field(self.field) if schema is not None else None
        if schema is not None and f is None:
            raise DataException(f"Unknown field: {self.field}")
        return self.updated(record, f.schema if f else None, value.get(self.field))


_JAVA_DATE = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"),
              ("SSS", "%f")]


def java_date_format(fmt: str) -> str:
    """SimpleDateFormat's common letters as strftime's."""
    out = fmt
    for java, py in _JAVA_DATE:
        out = out.replace(java, py)
    return out


class TimestampRouter(Transformation):
    """topic.format (``${topic}-${timestamp}``), timestamp.format (``yyyyMMdd``), in UTC."""

    def configure(self, props: dict[str, Any]) -> None:
        self.topic_format = str(props.get("topic.format") or "${topic}-${timestamp}")
        self.timestamp_format = java_date_format(str(props.get("timestamp.format") or "yyyyMMdd"))

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        if record.timestamp is None:
            raise DataException(f"Timestamp missing on record: {record}")
        stamp = time.strftime(self.timestamp_format.replace("%f", f"{record.timestamp % 1000:03d}"),
                              time.gmtime(record.timestamp / 1000))
        topic = self.topic_format.replace("${topic}", record.topic).replace("${timestamp}", stamp)
        return record.new_record(topic=topic)


class RegexRouter(Transformation):
    """The topic, when ``regex`` matches it whole, becomes ``replacement`` ($1 for groups)."""

    def configure(self, props: dict[str, Any]) -> None:
        self.regex = re.compile(_required(props, "regex"))
        self.replacement = re.sub(r"\$(\d+)", r"\\g<\1>", _required(props, "replacement"))

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        m = self.regex.fullmatch(record.topic)
        if m is None:
            return record
        return record.new_record(topic=m.expand(self.replacement))


class Filter(Transformation):
    """Drops every record (its predicate, with ``negate``, chooses which)."""

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        return None


# ---------------------------------------------------------------- predicates

class Predicate:
    def configure(self, props: dict[str, Any]) -> None:
        pass

    def test(self, record: ConnectRecord) -> bool:
        raise NotImplementedError


class TopicNameMatches(Predicate):
    def configure(self, props: dict[str, Any]) -> None:
        self.pattern = re.compile(_required(props, "pattern"))

    def test(self, record: ConnectRecord) -> bool:
        return self.pattern.fullmatch(record.topic) is not None


class HasHeaderKey(Predicate):
    def configure(self, props: dict[str, Any]) -> None:
        self.name = _required(props, "name")

    def test(self, record: ConnectRecord) -> bool:
        return any(k == self.name for k, _ in record.headers)


class RecordIsTombstone(Predicate):
    def test(self, record: ConnectRecord) -> bool:
        return record.value is None


class ExtractNewRecordState(Transformation):
    """Debezium's ``io.debezium.transforms.ExtractNewRecordState``: a change event becomes its ``after`` row.

    ``drop.tombstones`` (true), ``delete.handling.mode`` (``drop``; ``rewrite`` adds ``__deleted``;
    ``none`` passes the delete on as a tombstone), ``add.fields`` (envelope or source fields,
    added as ``__<name>``).
    """

    def configure(self, props: dict[str, Any]) -> None:
        self.drop_tombstones = str(props.get("drop.tombstones", "true")).lower() == "true"
        self.delete_mode = str(props.get("delete.handling.mode", "drop"))
        if self.delete_mode not in ("drop", "rewrite", "none"):
            raise ConnectException(f"Invalid value {self.delete_mode} for configuration delete.handling.mode")
        self.add_fields = _list(props.get("add.fields"))

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        value = record.value
        if value is None:
            return None if self.drop_tombstones else record
        if not isinstance(value, dict) or "op" not in value:
            return record  # not a change event (a heartbeat or schema change passes unchanged)
        schema = record.value_schema
        row_schema = schema.field("after").schema if schema is not None and schema.field("after") else None
        if value["op"] == "d":
            if self.delete_mode == "drop":
                return None
            if self.delete_mode == "none":
                return record.new_record(value_schema=None, value=None)
            row = dict(value.get("before") or {})
        else:
            row = dict(value.get("after") or {})
        extra: list[Field] = []
        for name in self.add_fields:
            source = name.startswith("source.")
            leaf = name.split(".", 1)[1] if source else name
            container = (value.get("source") or {}) if source else value
            row["__" + leaf] = container.get(leaf)
            extra.append(Field("__" + leaf, Schema("int64" if isinstance(row["__" + leaf], int) else "string", True)))
        if self.delete_mode == "rewrite":
            row["__deleted"] = "true" if value["op"] == "d" else "false"
            extra.append(Field("__deleted", OPTIONAL_STRING_SCHEMA))
        if row_schema is not None and extra:
            row_schema = Schema("struct", row_schema.optional, row_schema.name, fields=[*row_schema.fields, *extra])
        return record.new_record(value_schema=row_schema, value=row)


def _variant(cls: type, on_key: bool) -> type:
    return type(cls.__name__ + ("$Key" if on_key else "$Value"), (cls,), {"on_key": on_key})


TRANSFORMS: dict[str, type] = {PKG + "ValueToKey": ValueToKey, PKG + "TimestampRouter": TimestampRouter,
                               PKG + "RegexRouter": RegexRouter, PKG + "Filter": Filter,
                               "io.debezium.transforms.ExtractNewRecordState": ExtractNewRecordState}
for _cls in (InsertField, ReplaceField, ExtractField):
    for _on_key in (True, False):
        TRANSFORMS[PKG + _cls.__name__ + ("$Key" if _on_key else "$Value")] = _variant(_cls, _on_key)
PREDICATES: dict[str, type] = {PKG + "predicates." + c.__name__: c
                               for c in (TopicNameMatches, HasHeaderKey, RecordIsTombstone)}


class TransformationChain:
    """``transforms=a,b`` with ``transforms.a.type``, ``.predicate``, ``.negate`` and ``predicates=...``."""

    def __init__(self, config: dict[str, Any], find: Any) -> None:
        self.stages: list[tuple[Transformation, Predicate | None, bool]] = []
        predicates: dict[str, Predicate] = {}
        for alias in _list(config.get("predicates")):
            cls = find(_required(config, f"predicates.{alias}.type"), PREDICATES)
            p = cls()
            p.configure(_sub(config, f"predicates.{alias}."))
            predicates[alias] = p
        for alias in _list(config.get("transforms")):
            prefix = f"transforms.{alias}."
            cls = find(_required(config, prefix + "type"), TRANSFORMS)
            t = cls()
            t.configure(_sub(config, prefix))
            pname = config.get(prefix + "predicate")
            if pname and pname not in predicates:
                raise ConnectException(f"Invalid value {pname} for configuration {prefix}predicate: "
                                       f"the predicate is not in predicates")
            negate = str(config.get(prefix + "negate", "false")).lower() == "true"
            self.stages.append((t, predicates.get(pname) if pname else None, negate))

    def apply(self, record: ConnectRecord) -> ConnectRecord | None:
        for transform, predicate, negate in self.stages:
            if predicate is not None and predicate.test(record) == negate:
                continue
            record = transform.apply(record)
            if record is None:
                return None
        return record

    def close(self) -> None:
        for t, _, _ in self.stages:
            t.close()


def _sub(config: dict[str, Any], prefix: str) -> dict[str, Any]:
    return {k[len(prefix):]: v for k, v in config.items() if k.startswith(prefix)}
