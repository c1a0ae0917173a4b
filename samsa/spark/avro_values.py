"""Confluent-Avro values decoded into a column (``valueFormat=avro``): the record's schema
comes from a Schema Registry (``schema.registry.url``; subject ``valueSubject``, by default
``<topic>-value``; version ``valueSchemaVersion``, by default the latest, read when the query
starts), and each value is read with the schema of its own id resolved to that one (Avro's
schema resolution), as fastavro does it. A value that cannot be decoded (not in the wire
format, an unknown id, a writer schema that does not resolve) gives a null ``decodedValue``.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
from pyspark.sql.types import (ArrayType, BinaryType, BooleanType, DataType, DateType, DecimalType, DoubleType,
                               FloatType, IntegerType, LongType, MapType, StringType, StructField, StructType,
                               TimestampType)

from samsa.serialization import SerializationError
from samsa.serialization.schema_registry import SchemaRegistryClient, SchemaRegistryError

COLUMN = "decodedValue"


class AvroOptionError(ValueError):
    pass


def fetch_schema(url: str, subject: str, version: str) -> str:
    """The Avro schema (JSON text) of ``subject`` at ``version``."""
    try:
        found = SchemaRegistryClient({"url": url, "timeout": 15}).version(subject, version)
    except SchemaRegistryError as e:
        raise AvroOptionError(f"Cannot read the value schema of subject {subject} version {version} from the "
                              f"schema registry at {url}: {e.message}") from None
    if found.get("schemaType", "AVRO") != "AVRO":
        raise AvroOptionError(f"Subject {subject} holds a {found['schemaType']} schema, not Avro")
    if found.get("references"):
        raise AvroOptionError(f"Subject {subject}: schemas with references are not supported by valueFormat=avro")
    return found["schema"]


def _nullable(avro: Any) -> tuple[Any, bool]:
    if isinstance(avro, list):
        rest = [b for b in avro if b != "null"]
        if len(rest) != 1:
            raise AvroOptionError(f"Avro unions other than with null have no Spark column type: {avro}")
        return rest[0], len(rest) < len(avro)
    return avro, False


def _named(avro: Any, named: dict) -> Any:
    if isinstance(avro, str) and avro in named:
        return named[avro]
    if isinstance(avro, dict) and isinstance(avro.get("type"), (dict, list)):
        return avro["type"]
    return avro


def spark_type(avro: Any, named: dict | None = None) -> DataType:
    """The Spark type of an Avro type, as spark-avro maps them."""
    named = {} if named is None else named
    avro = _named(avro, named)
    if isinstance(avro, list):
        return spark_type(_nullable(avro)[0], named)
    t = avro if isinstance(avro, str) else avro["type"]
    logical = avro.get("logicalType") if isinstance(avro, dict) else None
    if logical == "decimal":
        return DecimalType(avro.get("precision", 10), avro.get("scale", 0))
    if logical == "date":
        return DateType()
    if logical in ("timestamp-millis", "timestamp-micros"):
        return TimestampType()
    if t == "record":
        named[avro["name"]] = avro
        if avro.get("namespace"):
            named[f"{avro['namespace']}.{avro['name']}"] = avro
        return StructType([StructField(f["name"], spark_type(f["type"], named), _nullable(f["type"])[1])
                           for f in avro["fields"]])
    if t == "array":
        items, null = _nullable(avro["items"])
        return ArrayType(spark_type(items, named), null)
    if t == "map":
        values, null = _nullable(avro["values"])
        return MapType(StringType(), spark_type(values, named), null)
    simple = {"int": IntegerType(), "long": LongType(), "float": FloatType(), "double": DoubleType(),
              "boolean": BooleanType(), "string": StringType(), "enum": StringType(), "bytes": BinaryType(),
              "fixed": BinaryType()}
    if t not in simple:
        raise AvroOptionError(f"Unsupported Avro type {t}")
    return simple[t]


def arrow_type(dt: DataType) -> pa.DataType:
    """The Arrow type Spark expects a Python source to return for ``dt`` (its own conversion)."""
    from pyspark.sql.pandas.types import to_arrow_type
    return to_arrow_type(dt, timezone="UTC")


def value_field(schema_text: str) -> StructField:
    return StructField(COLUMN, spark_type(json.loads(schema_text)), True)


_decoders: dict[tuple[str, str], Any] = {}


def _arrow_value(dt: DataType, v: Any) -> Any:
    if v is None:
        return None
    if isinstance(dt, MapType):
        return list(v.items())
    if isinstance(dt, StructType):
        return {f.name: _arrow_value(f.dataType, v.get(f.name)) for f in dt.fields}
    if isinstance(dt, ArrayType):
        return [_arrow_value(dt.elementType, x) for x in v]
    return v


def decode_column(values: pa.Array, url: str, schema_text: str) -> pa.Array:
    """The decoded values of a binary column (nulls where a value does not decode)."""
    from samsa.serialization.avro import KafkaAvroDeserializer
    key = (url, schema_text)
    de = _decoders.get(key)
    if de is None:
        de = _decoders[key] = KafkaAvroDeserializer(schema_text, {"schema.registry.url": url})
    dt = spark_type(json.loads(schema_text))
    out = []
    for v in values.to_pylist():
        try:
            out.append(None if v is None else _arrow_value(dt, de.deserialize("", v)))
        except (SerializationError, ValueError, TypeError, KeyError):
            out.append(None)
    return pa.array(out, type=arrow_type(dt))
