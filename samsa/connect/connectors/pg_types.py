"""PostgreSQL column types as Debezium maps them to Connect schemas, and text values to Connect values.

Both the snapshot (columns selected as ``::text``) and pgoutput (text format) give each value
as PostgreSQL's text output, so one conversion serves both. Temporal types follow Debezium's
``time.precision.mode=adaptive``; ``numeric`` follows ``decimal.handling.mode``
(``precise``: Connect's Decimal when the column has a scale, ``double``, ``string``).
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from typing import Any, Callable

from samsa.connect.data import Schema

BOOL, BYTEA, INT8, INT2, INT4, TEXT, OID, JSON, FLOAT4, FLOAT8 = 16, 17, 20, 21, 23, 25, 26, 114, 700, 701
BPCHAR, VARCHAR, DATE, TIME, TIMESTAMP, TIMESTAMPTZ, NUMERIC, UUID, JSONB = 1042, 1043, 1082, 1083, 1114, 1184, \
    1700, 2950, 3802

UNAVAILABLE = "__debezium_unavailable_value"  # Debezium's placeholder for an unchanged TOASTed value
EPOCH = dt.datetime(1970, 1, 1)
DECIMAL = "org.apache.kafka.connect.data.Decimal"


def _scale(type_mod: int) -> int | None:
    return None if type_mod < 4 else (type_mod - 4) & 0xFFFF


def schema_for(type_oid: int, type_mod: int, optional: bool, decimal_mode: str = "precise") -> Schema:
    def s(t: str, name: str | None = None, params: dict[str, str] | None = None) -> Schema:
        return Schema(t, optional, name, version=1 if name and name.startswith("io.debezium") else None,
                      parameters=params)
    if type_oid == BOOL:
        return s("boolean")
    if type_oid == INT2:
        return s("int16")
    if type_oid in (INT4, OID):
        return s("int32")
    if type_oid == INT8:
        return s("int64")
    if type_oid == FLOAT4:
        return s("float32")
    if type_oid == FLOAT8:
        return s("float64")
    if type_oid == NUMERIC:
        scale = _scale(type_mod)
        if decimal_mode == "double":
            return s("float64")
        if decimal_mode == "precise" and scale is not None:
            return Schema("bytes", optional, DECIMAL, 1, parameters={"scale": str(scale),
                                                                    "connect.decimal.precision":
                                                                        str((type_mod - 4) >> 16)})
        return s("string")
    if type_oid == BYTEA:
        return s("bytes")
    if type_oid == DATE:
        return s("int32", "io.debezium.time.Date")
    if type_oid == TIME:
        return s("int64", "io.debezium.time.MicroTime")
    if type_oid == TIMESTAMP:
        return s("int64", "io.debezium.time.MicroTimestamp")
    if type_oid == TIMESTAMPTZ:
        return s("string", "io.debezium.time.ZonedTimestamp")
    if type_oid == UUID:
        return s("string", "io.debezium.data.Uuid")
    if type_oid in (JSON, JSONB):
        return s("string", "io.debezium.data.Json")
    return s("string")


def _timestamp(text: str) -> int:
    t = dt.datetime.fromisoformat(text)
    return (t - EPOCH) // dt.timedelta(microseconds=1)


def _zoned(text: str) -> str:
    t = dt.datetime.fromisoformat(text).astimezone(dt.timezone.utc)
    return t.isoformat().replace("+00:00", "Z")


def _time(text: str) -> int:
    t = dt.time.fromisoformat(text)
    return ((t.hour * 60 + t.minute) * 60 + t.second) * 1_000_000 + t.microsecond


def _decimal(schema: Schema) -> Callable[[str], Any]:
    if schema.name == DECIMAL:
        scale = int((schema.parameters or {})["scale"])

        def to_bytes(text: str) -> bytes:
            unscaled = int(decimal.Decimal(text).scaleb(scale).to_integral_value())
            return unscaled.to_bytes(max(1, (unscaled.bit_length() + 8) // 8), "big", signed=True)
        return to_bytes
    if schema.type == "float64":
        return float
    return str


def converter(type_oid: int, schema: Schema) -> Callable[[str], Any]:
    """Text output of PostgreSQL → the Connect value for ``schema``."""
    if type_oid == BOOL:
        return lambda t: t == "t"
    if type_oid in (INT2, INT4, INT8, OID):
        return int
    if type_oid in (FLOAT4, FLOAT8):
        return float
    if type_oid == NUMERIC:
        return _decimal(schema)
    if type_oid == BYTEA:
        return lambda t: bytes.fromhex(t[2:]) if t.startswith("\\x") else t.encode()
    if type_oid == DATE:
        return lambda t: (dt.date.fromisoformat(t) - EPOCH.date()).days
    if type_oid == TIME:
        return _time
    if type_oid == TIMESTAMP:
        return _timestamp
    if type_oid == TIMESTAMPTZ:
        return _zoned
    if type_oid in (JSON, JSONB):
        return lambda t: json.dumps(json.loads(t), separators=(",", ":")) if type_oid == JSONB else t
    return str
