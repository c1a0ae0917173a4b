"""A JDBC sink into PostgreSQL, as Confluent's ``io.confluent.connect.jdbc.JdbcSinkConnector``.

Keys: ``connection.url`` (``jdbc:postgresql://host:port/db``), ``connection.user``,
``connection.password``, ``table.name.format`` (``${topic}``), ``insert.mode``
(``insert``/``upsert``/``update``), ``pk.mode`` (``none``/``kafka``/``record_key``/
``record_value``), ``pk.fields``, ``delete.enabled`` (a tombstone deletes the row of its key),
``auto.create`` and ``auto.evolve``. Each ``put`` is one database transaction. Upserts
(``INSERT … ON CONFLICT (pk) DO UPDATE``) and deletes by key are idempotent, so records
redelivered after a crash leave the table as it was.
"""

from __future__ import annotations

import datetime as dt
import decimal
import logging
from typing import Any
from urllib.parse import parse_qs, urlparse

from samsa.connect.api import ConfigKey, SinkConnector, SinkTask
from samsa.connect.data import Schema, SinkRecord
from samsa.connect.errors import ConnectException

log = logging.getLogger(__name__)

EPOCH = dt.datetime(1970, 1, 1)
KAFKA_PK = ("__connect_topic", "__connect_partition", "__connect_offset")


def _config_def() -> list[ConfigKey]:
    return [
        ConfigKey("connection.url", doc="JDBC connection URL (jdbc:postgresql://host:port/database)"),
        ConfigKey("connection.user", default=None), ConfigKey("connection.password", "PASSWORD", None),
        ConfigKey("topics", "LIST", None), ConfigKey("topics.regex", default=None),
        ConfigKey("table.name.format", default="${topic}", importance="MEDIUM"),
        ConfigKey("insert.mode", default="insert", doc="insert, upsert or update"),
        ConfigKey("pk.mode", default="none", doc="none, kafka, record_key or record_value"),
        ConfigKey("pk.fields", "LIST", "", "MEDIUM"),
        ConfigKey("delete.enabled", "BOOLEAN", "false", "MEDIUM"),
        ConfigKey("auto.create", "BOOLEAN", "false", "MEDIUM"),
        ConfigKey("auto.evolve", "BOOLEAN", "false", "MEDIUM"),
        ConfigKey("batch.size", "INT", "3000", "MEDIUM"),
    ]


class JdbcSinkConnector(SinkConnector):
    def version(self) -> str:
        return "10.7.6-samsa"

    def config_def(self) -> list[ConfigKey]:
        return _config_def()

    def validate(self, config: dict[str, str]) -> list[tuple[str, str]]:
        errors = []
        url = str(config.get("connection.url", ""))
        if url and not url.startswith("jdbc:postgresql://"):
            errors.append(("connection.url", f"Unsupported JDBC URL {url}: only jdbc:postgresql:// here"))
        mode, pk = config.get("insert.mode", "insert"), config.get("pk.mode", "none")
        if mode not in ("insert", "upsert", "update"):
            errors.append(("insert.mode", f"Invalid value {mode} for configuration insert.mode"))
        if pk not in ("none", "kafka", "record_key", "record_value"):
            errors.append(("pk.mode", f"Invalid value {pk} for configuration pk.mode"))
        if str(config.get("delete.enabled", "false")).lower() == "true" and pk != "record_key":
            errors.append(("delete.enabled", "Deletes are only supported for pk.mode record_key"))
        if mode in ("upsert", "update") and pk == "none":
            errors.append(("pk.mode", f"insert.mode {mode} needs a primary key (pk.mode is none)"))
        return errors

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)

    def task_class(self) -> type:
        return JdbcSinkTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props) for _ in range(max_tasks)]


def conninfo(props: dict[str, str]) -> str:
    from psycopg.conninfo import make_conninfo
    url = urlparse(props["connection.url"][len("jdbc:"):])
    query = {k: v[-1] for k, v in parse_qs(url.query).items()}
    kw = {"host": url.hostname or "localhost", "port": str(url.port or 5432), "dbname": url.path.lstrip("/")}
    user = props.get("connection.user") or query.get("user")
    password = props.get("connection.password") or query.get("password")
    if user:
        kw["user"] = user
    if password:
        kw["password"] = password
    return make_conninfo("", **kw)


def sql_type(schema: Schema) -> str:
    """PostgreSQL's column type for a Connect schema (Connect's and Debezium's logical types too)."""
    by_name = {"org.apache.kafka.connect.data.Decimal": "NUMERIC", "org.apache.kafka.connect.data.Date": "DATE",
               "org.apache.kafka.connect.data.Time": "TIME", "org.apache.kafka.connect.data.Timestamp": "TIMESTAMP",
               "io.debezium.time.Date": "DATE", "io.debezium.time.MicroTime": "TIME",
               "io.debezium.time.MicroTimestamp": "TIMESTAMP", "io.debezium.time.Timestamp": "TIMESTAMP",
               "io.debezium.time.ZonedTimestamp": "TIMESTAMPTZ", "io.debezium.data.Uuid": "UUID",
               "io.debezium.data.Json": "JSONB"}
    if schema.name in by_name:
        return by_name[schema.name]
    return {"int8": "SMALLINT", "int16": "SMALLINT", "int32": "INT", "int64": "BIGINT", "float32": "REAL",
            "float64": "DOUBLE PRECISION", "boolean": "BOOLEAN", "string": "TEXT", "bytes": "BYTEA"}.get(
        schema.type, "TEXT")


def sql_value(schema: Schema | None, value: Any) -> Any:
    if value is None or schema is None:
        return value
    name = schema.name
    if name == "org.apache.kafka.connect.data.Decimal":
        raw = value if isinstance(value, (bytes, bytearray)) else bytes(value)
        return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-int((schema.parameters or {})["scale"]))
    if name in ("io.debezium.time.Date", "org.apache.kafka.connect.data.Date"):
        return EPOCH.date() + dt.timedelta(days=int(value))
    if name == "io.debezium.time.MicroTimestamp":
        return EPOCH + dt.timedelta(microseconds=int(value))
    if name in ("io.debezium.time.Timestamp", "org.apache.kafka.connect.data.Timestamp"):
        return EPOCH + dt.timedelta(milliseconds=int(value))
    if name == "io.debezium.time.MicroTime":
        return (EPOCH + dt.timedelta(microseconds=int(value))).time()
    if isinstance(value, (dict, list)):
        import json
        return json.dumps(value)
    return value


def _infer(value: Any) -> Schema:
    """A schema for a schemaless value (JsonConverter with ``schemas.enable=false``)."""
    if isinstance(value, bool):
        return Schema("boolean", True)
    if isinstance(value, int):
        return Schema("int64", True)
    if isinstance(value, float):
        return Schema("float64", True)
    if isinstance(value, (bytes, bytearray)):
        return Schema("bytes", True)
    return Schema("string", True)


class JdbcSinkTask(SinkTask):
    def version(self) -> str:
        return "10.7.6-samsa"

    def start(self, props: dict[str, str]) -> None:
        import psycopg
        self.props = props
        self.insert_mode = props.get("insert.mode", "insert")
        self.pk_mode = props.get("pk.mode", "none")
        self.pk_fields = [f.strip() for f in props.get("pk.fields", "").split(",") if f.strip()]
        self.delete_enabled = props.get("delete.enabled", "false").lower() == "true"
        self.auto_create = props.get("auto.create", "false").lower() == "true"
        self.auto_evolve = props.get("auto.evolve", "false").lower() == "true"
        self.table_format = props.get("table.name.format", "${topic}")
        self.conn = psycopg.connect(conninfo(props), autocommit=True)
        self.columns: dict[tuple[str, str], set[str]] = {}

    # ---------------------------------------------------------------- tables

    def table_of(self, topic: str) -> tuple[str, str]:
        name = self.table_format.replace("${topic}", topic)
        parts = name.split(".")
        return ("public" if len(parts) == 1 else parts[-2]), parts[-1]

    def _existing(self, table: tuple[str, str]) -> set[str]:
        if table not in self.columns:
            rows = self.conn.execute("SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                                     "AND table_name = %s", table).fetchall()
            if rows:
                self.columns[table] = {r[0] for r in rows}
        return self.columns.get(table, set())

    def _ensure_table(self, table: tuple[str, str], fields: list[tuple[str, Schema]], pk: list[str]) -> None:
        from psycopg import sql
        existing = self._existing(table)
        if not existing:
            if not self.auto_create:
                raise ConnectException(f'Table "{table[0]}"."{table[1]}" is missing and auto.create is disabled')
            cols = [sql.SQL("{} {}{}").format(sql.Identifier(n), sql.SQL(sql_type(s)),
                                              sql.SQL("" if s.optional and n not in pk else " NOT NULL"))
                    for n, s in fields]
            if pk:
                cols.append(sql.SQL("PRIMARY KEY ({})").format(sql.SQL(", ").join(map(sql.Identifier, pk))))
            self.conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                sql.Identifier(*table), sql.SQL(", ").join(cols)))
            log.info("Created table %s.%s", *table)
            self.columns.pop(table, None)
            return
        missing = [(n, s) for n, s in fields if n not in existing]
        if missing:
            if not self.auto_evolve:
                raise ConnectException(f"Table {table[1]} is missing fields {[n for n, _ in missing]} and "
                                       "auto.evolve is disabled")
            for n, s in missing:
                self.conn.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                    sql.Identifier(*table), sql.Identifier(n), sql.SQL(sql_type(s))))
            self.columns.pop(table, None)

    # ---------------------------------------------------------------- records

    def _fields(self, schema: Schema | None, value: Any) -> list[tuple[str, Schema]]:
        if schema is not None and schema.type == "struct":
            return [(f.name, f.schema) for f in schema.fields or []]
        if isinstance(value, dict):
            return [(k, _infer(v)) for k, v in value.items()]
        raise ConnectException(f"Sink connector requires records with a Struct or Map value, found "
                               f"{type(value).__name__}")

    def _key_columns(self, record: SinkRecord) -> list[tuple[str, Schema, Any]]:
        """(column, schema, value) of the record's primary key under pk.mode."""
        if self.pk_mode == "kafka":
            names = self.pk_fields or list(KAFKA_PK)
            values = [record.topic, record.kafka_partition, record.kafka_offset]
            schemas = [Schema("string"), Schema("int32"), Schema("int64")]
            return list(zip(names, schemas, values))
        if self.pk_mode == "record_key":
            fields = self._fields(record.key_schema, record.key) if isinstance(record.key, dict) else \
                [(self.pk_fields[0] if self.pk_fields else "__connect_key",
                  record.key_schema or _infer(record.key))]
            if self.pk_fields and isinstance(record.key, dict):
                fields = [(n, s) for n, s in fields if n in self.pk_fields]
            return [(n, s, record.key.get(n) if isinstance(record.key, dict) else record.key) for n, s in fields]
        if self.pk_mode == "record_value":
            fields = self._fields(record.value_schema, record.value)
            if self.pk_fields:
                fields = [(n, s) for n, s in fields if n in self.pk_fields]
            return [(n, s, record.value.get(n)) for n, s in fields]
        return []

    def put(self, records: list[SinkRecord]) -> None:
        if not records:
            return
        with self.conn.transaction():
            for r in records:
                self._write(r)

    def _write(self, r: SinkRecord) -> None:
        from psycopg import sql
        table = self.table_of(r.topic)
        key = self._key_columns(r)
        pk = [n for n, _, _ in key]
        if r.value is None:
            if not self.delete_enabled:
                return
            if not self._existing(table):
                return
            where = sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in pk)
            self.conn.execute(sql.SQL("DELETE FROM {} WHERE {}").format(sql.Identifier(*table), where),
                              [sql_value(s, v) for _, s, v in key])
            return
        fields = self._fields(r.value_schema, r.value)
        values = {n: sql_value(s, r.value.get(n)) for n, s in fields}
        for n, s, v in key:  # the key's columns (kafka, record_key) join the row
            if n not in values:
                fields.append((n, s))
                values[n] = sql_value(s, v)
        self._ensure_table(table, fields, pk)
        names = list(values)
        cols = sql.SQL(", ").join(map(sql.Identifier, names))
        marks = sql.SQL(", ").join(sql.Placeholder() * len(names))
        target = sql.Identifier(*table)
        if self.insert_mode == "update":
            sets = sql.SQL(", ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in names if n not in pk)
            where = sql.SQL(" AND ").join(sql.SQL("{} = %s").format(sql.Identifier(n)) for n in pk)
            self.conn.execute(sql.SQL("UPDATE {} SET {} WHERE {}").format(target, sets, where),
                              [values[n] for n in names if n not in pk] + [values[n] for n in pk])
            return
        query = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(target, cols, marks)
        if self.insert_mode == "upsert":
            rest = [n for n in names if n not in pk]
            action = sql.SQL("DO UPDATE SET {}").format(sql.SQL(", ").join(
                sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(n)) for n in rest)) if rest else \
                sql.SQL("DO NOTHING")
            query = sql.SQL("{} ON CONFLICT ({}) {}").format(query, sql.SQL(", ").join(map(sql.Identifier, pk)),
                                                             action)
        self.conn.execute(query, [values[n] for n in names])

    def flush(self, offsets: dict[Any, int]) -> None:
        """Every put() committed its own transaction: nothing is left to write."""

    def stop(self) -> None:
        try:
            self.conn.close()
        except Exception:  # noqa: BLE001
            pass

