"""PostgreSQL change data capture, as Debezium's ``io.debezium.connector.postgresql.PostgresConnector``.

Logical replication with ``plugin.name=pgoutput``: a publication for the captured tables, a
replication slot, an initial snapshot read in the slot's exported snapshot (``op`` ``r``),
then every insert, update and delete as Debezium's change event (``before``, ``after``,
``source``, ``op``, ``ts_ms``) on ``<topic.prefix>.<schema>.<table>``, keyed by the primary
key, with a tombstone after each delete.

Resumption. The source partition is ``{"server": topic.prefix}``; each event's offset holds
its transaction's commit LSN (``lsn_commit``), its own ``lsn`` and its place in the
transaction (``event``). The slot's confirmed flush LSN advances only in :meth:`commit`,
which the worker calls after the offsets are stored, and only to the end of a transaction all
of whose events were handed over. After a crash PostgreSQL resends from that point and the
task skips every event at or before the stored offset: no committed change is lost.

Duplicates. Events the previous run produced after its last stored offset are produced again
(Debezium's documented at-least-once after a crash). Those are the events of transactions
committed before the restart and after the stored offset: each of them carries the header
``samsa.cdc.possible.duplicate: true`` (events committed after the restart never do), so a
consumer that must see each change once drops a marked event it has already seen
(by ``source.lsn`` and ``source.txId``). A snapshot cut short is redone whole, marked likewise.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any, Iterator

from samsa.connect.api import ConfigKey, SourceConnector, SourceTask
from samsa.connect.connectors import pg_types
from samsa.connect.connectors.pgoutput import (Begin, Change, Commit, Relation, ReplicationConnection, decode,
                                               lsn_str, parse_lsn)
from samsa.connect.data import Field, Schema, SourceRecord
from samsa.connect.errors import ConnectException

log = logging.getLogger(__name__)

DUPLICATE_HEADER = "samsa.cdc.possible.duplicate"
VERSION = "2.7.0.Final-samsa"
SYSTEM_SCHEMAS = "('pg_catalog', 'information_schema')"


def _config_def() -> list[ConfigKey]:
    return [
        ConfigKey("topic.prefix", doc="Topic prefix that identifies and provides a namespace for this database "
                                      "server"),
        ConfigKey("database.hostname", doc="Resolvable hostname or IP address of the database server."),
        ConfigKey("database.port", "INT", 5432, doc="Port of the database server."),
        ConfigKey("database.user", doc="Name of the database user to be used when connecting to the database."),
        ConfigKey("database.password", "PASSWORD", None, doc="Password of the database user."),
        ConfigKey("database.dbname", doc="The name of the database from which the connector should capture "
                                         "changes"),
        ConfigKey("plugin.name", default="decoderbufs", doc="The name of the Postgres logical decoding plugin "
                                                            "(only pgoutput here)"),
        ConfigKey("slot.name", default="debezium", doc="The name of the Postgres logical decoding slot"),
        ConfigKey("slot.drop.on.stop", "BOOLEAN", "false", "MEDIUM"),
        ConfigKey("publication.name", default="dbz_publication", doc="The name of the publication"),
        ConfigKey("publication.autocreate.mode", default="all_tables", doc="all_tables, filtered or disabled"),
        ConfigKey("table.include.list", "LIST", None, doc="Regular expressions of schema.table to capture"),
        ConfigKey("table.exclude.list", "LIST", None),
        ConfigKey("snapshot.mode", default="initial", doc="initial, initial_only, no_data (never)"),
        ConfigKey("tombstones.on.delete", "BOOLEAN", "true", "MEDIUM"),
        ConfigKey("decimal.handling.mode", default="precise", doc="precise, double or string"),
        ConfigKey("max.batch.size", "INT", "2048", "MEDIUM"),
        ConfigKey("poll.interval.ms", "LONG", "500", "MEDIUM"),
    ]


class PostgresConnector(SourceConnector):
    def version(self) -> str:
        return VERSION

    def config_def(self) -> list[ConfigKey]:
        return _config_def()

    def validate(self, config: dict[str, str]) -> list[tuple[str, str]]:
        errors = []
        plugin = config.get("plugin.name", "decoderbufs")
        if plugin != "pgoutput":
            errors.append(("plugin.name", f"Value '{plugin}' is not supported: only pgoutput"))
        mode = config.get("snapshot.mode", "initial")
        if mode not in ("initial", "initial_only", "no_data", "never"):
            errors.append(("snapshot.mode", f"Value '{mode}' must be one of initial, initial_only, no_data, never"))
        if config.get("publication.autocreate.mode", "all_tables") not in ("all_tables", "filtered", "disabled"):
            errors.append(("publication.autocreate.mode", "must be all_tables, filtered or disabled"))
        for key in ("table.include.list", "table.exclude.list"):
            for pattern in _patterns(config.get(key)):
                try:
                    re.compile(pattern)
                except re.error as e:
                    errors.append((key, f"Invalid regular expression {pattern}: {e}"))
        return errors

    def start(self, props: dict[str, str]) -> None:
        self.props = dict(props)

    def task_class(self) -> type:
        return PostgresConnectorTask

    def task_configs(self, max_tasks: int) -> list[dict[str, str]]:
        return [dict(self.props)]  # one task: a slot is read by one client


def _patterns(value: str | None) -> list[str]:
    return [p.strip() for p in (value or "").split(",") if p.strip()]


def conninfo(props: dict[str, str]) -> str:
    from psycopg.conninfo import make_conninfo
    kw = {"host": props["database.hostname"], "port": props.get("database.port", "5432"),
          "user": props["database.user"], "dbname": props["database.dbname"]}
    if props.get("database.password"):
        kw["password"] = props["database.password"]
    return make_conninfo("", **kw)


SOURCE_SCHEMA = Schema("struct", name="io.debezium.connector.postgresql.Source", fields=[
    Field("version", Schema("string")), Field("connector", Schema("string")), Field("name", Schema("string")),
    Field("ts_ms", Schema("int64")),
    Field("snapshot", Schema("string", True, "io.debezium.data.Enum", 1, default="false",
                             parameters={"allowed": "true,last,false,incremental"})),
    Field("db", Schema("string")), Field("sequence", Schema("string", True)), Field("schema", Schema("string")),
    Field("table", Schema("string")), Field("txId", Schema("int64", True)), Field("lsn", Schema("int64", True)),
    Field("xmin", Schema("int64", True))])
TRANSACTION_SCHEMA = Schema("struct", True, "event.block", 1, fields=[
    Field("id", Schema("string")), Field("total_order", Schema("int64")),
    Field("data_collection_order", Schema("int64"))])


class Table:
    """One captured table: its columns, key, schemas and value converters."""

    def __init__(self, prefix: str, schema: str, name: str, columns: list[tuple[str, int, int]], pk: list[str],
                 decimal_mode: str):
        self.schema, self.name = schema, name
        self.topic = f"{prefix}.{schema}.{name}"
        self.columns = [c[0] for c in columns]
        self.pk = [c for c in self.columns if c in pk]
        fields = [Field(n, pg_types.schema_for(oid, mod, n not in pk, decimal_mode)) for n, oid, mod in columns]
        self.convert = [pg_types.converter(oid, f.schema) for (_, oid, _), f in zip(columns, fields)]
        self.value_schema = Schema("struct", True, f"{self.topic}.Value", fields=fields)
        self.key_schema = Schema("struct", False, f"{self.topic}.Key",
                                 fields=[f for f in fields if f.name in pk]) if pk else None
        self.envelope = Schema("struct", False, f"{self.topic}.Envelope", 1, fields=[
            Field("before", self.value_schema), Field("after", self.value_schema), Field("source", SOURCE_SCHEMA),
            Field("op", Schema("string")), Field("ts_ms", Schema("int64", True)),
            Field("transaction", TRANSACTION_SCHEMA)])

    def row(self, values: list[tuple[str, str | None]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, field, conv, (kind, text) in zip(self.columns, self.value_schema.fields or [], self.convert, values):
            if kind == "t" and text is not None:
                out[name] = conv(text)
            elif kind == "u":
                out[name] = pg_types.UNAVAILABLE if field.schema.type == "string" else None
            else:
                out[name] = None
        return out

    def key(self, row: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if row is None or self.key_schema is None else {c: row.get(c) for c in self.pk}


class PostgresConnectorTask(SourceTask):
    def version(self) -> str:
        return VERSION

    def start(self, props: dict[str, str]) -> None:
        import psycopg
        self.props = props
        self.prefix = props["topic.prefix"]
        self.dbname = props["database.dbname"]
        self.slot = props.get("slot.name", "debezium")
        self.publication = props.get("publication.name", "dbz_publication")
        self.decimal_mode = props.get("decimal.handling.mode", "precise")
        self.tombstones = props.get("tombstones.on.delete", "true").lower() == "true"
        self.batch = int(props.get("max.batch.size", "2048"))
        self.poll_timeout = int(props.get("poll.interval.ms", "500")) / 1000
        self.include = [re.compile(p) for p in _patterns(props.get("table.include.list"))]
        self.exclude = [re.compile(p) for p in _patterns(props.get("table.exclude.list"))]
        self.partition = {"server": self.prefix}
        self.conninfo = conninfo(props)
        self.sql = psycopg.connect(self.conninfo, autocommit=True)
        self.repl: ReplicationConnection | None = None
        self.tables: dict[tuple[str, str], Table] = {}
        self.relations: dict[int, Relation] = {}
        self.snapshot_rows: Iterator[SourceRecord] | None = None
        self.tx: Begin | None = None
        self.tx_event = 0
        self.confirmable = 0      # end LSN of the last transaction whose events poll() has all returned
        self.skip_to = (0, -1)    # (commit LSN, event) at or before which events were already produced
        self.horizon = 0          # events of transactions committed before it may have been produced before

        self._ensure_publication()
        stored = self.context.offset_storage_reader.offset(self.partition)
        mode = props.get("snapshot.mode", "initial")
        snapshot_done = stored is not None and not (stored.get("snapshot") and not stored.get("last_snapshot_record"))
        self.repl = ReplicationConnection(self.conninfo)
        slot_exists = bool(self.sql.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                                            (self.slot,)).fetchone())
        if stored is not None:
            self.horizon = parse_lsn(self.sql.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0])
        if snapshot_done:
            if "lsn_commit" in stored:
                self.skip_to = (int(stored["lsn_commit"]), int(stored.get("event", 10 ** 9)))
            else:  # the snapshot's last record: transactions committed from its consistent point on are new
                self.skip_to = (int(stored.get("lsn", 0)) - 1, 10 ** 9)
            if not slot_exists:
                log.warning("Replication slot %s is gone: changes since offset %s are lost; creating it", self.slot,
                            stored)
                self.repl.command(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL pgoutput NOEXPORT_SNAPSHOT')
            self._start_streaming()
        elif mode in ("initial", "initial_only"):
            if slot_exists:  # a snapshot cut short (or offsets lost): snapshot again from a new slot
                self.sql.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
            cols = self.repl.command(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL pgoutput EXPORT_SNAPSHOT')
            self.snapshot_rows = self._snapshot(parse_lsn(cols[0][1]), cols[0][2], stored is not None)
        else:
            if not slot_exists:
                self.repl.command(f'CREATE_REPLICATION_SLOT "{self.slot}" LOGICAL pgoutput NOEXPORT_SNAPSHOT')
            self._start_streaming()

    # ---------------------------------------------------------------- catalog

    def _captured(self, schema: str, table: str) -> bool:
        name = f"{schema}.{table}"
        if self.include and not any(p.fullmatch(name) for p in self.include):
            return False
        return not any(p.fullmatch(name) for p in self.exclude)

    def _captured_tables(self) -> list[tuple[str, str]]:
        rows = self.sql.execute("SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON "
                                "n.oid = c.relnamespace WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN "
                                f"{SYSTEM_SCHEMAS} AND n.nspname NOT LIKE 'pg\\_%%' ORDER BY 1, 2").fetchall()
        return [(s, t) for s, t in rows if self._captured(s, t)]

    def _ensure_publication(self) -> None:
        from psycopg import sql
        mode = self.props.get("publication.autocreate.mode", "all_tables")
        exists = self.sql.execute("SELECT 1 FROM pg_publication WHERE pubname = %s", (self.publication,)).fetchone()
        if mode == "disabled":
            if not exists:
                raise ConnectException(f"Publication '{self.publication}' does not exist and "
                                       "publication.autocreate.mode is disabled")
            return
        pub = sql.Identifier(self.publication)
        if mode == "all_tables":
            if not exists:
                self.sql.execute(sql.SQL("CREATE PUBLICATION {} FOR ALL TABLES").format(pub))
            return
        tables = sql.SQL(", ").join(sql.Identifier(s, t) for s, t in self._captured_tables())
        if not self._captured_tables():
            raise ConnectException("No table matches table.include.list: nothing to publish")
        verb = "ALTER PUBLICATION {} SET TABLE {}" if exists else "CREATE PUBLICATION {} FOR TABLE {}"
        self.sql.execute(sql.SQL(verb).format(pub, tables))

    def _table(self, schema: str, name: str, refresh: bool = False) -> Table:
        key = (schema, name)
        if refresh or key not in self.tables:
            rows = self.sql.execute(
                "SELECT a.attname, a.atttypid::int, a.atttypmod, EXISTS (SELECT 1 FROM pg_index i WHERE "
                "i.indrelid = a.attrelid AND i.indisprimary AND a.attnum = ANY(i.indkey)) FROM pg_attribute a "
                "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = '' "
                "ORDER BY a.attnum", (f'"{schema}"."{name}"',)).fetchall()
            self.tables[key] = Table(self.prefix, schema, name, [(r[0], r[1], r[2]) for r in rows],
                                     [r[0] for r in rows if r[3]], self.decimal_mode)
        return self.tables[key]

    # ---------------------------------------------------------------- snapshot

    def _snapshot(self, lsn: int, snapshot_name: str, redo: bool) -> Iterator[SourceRecord]:
        """Every row of every captured table as of the slot's consistent point, then streaming."""
        import psycopg
        from psycopg import sql
        tables = [self._table(s, t) for s, t in self._captured_tables()]
        conn = psycopg.connect(self.conninfo)
        try:
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            conn.execute(sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(snapshot_name)))
            xid = int(conn.execute("SELECT txid_current()").fetchone()[0])
            ts_ms = int(time.time() * 1000)
            log.info("Snapshot of %d tables at LSN %s", len(tables), lsn_str(lsn))

            def rows() -> Iterator[tuple[Table, list]]:
                for t in tables:
                    cols = sql.SQL(", ").join(sql.SQL("{}::text").format(sql.Identifier(c)) for c in t.columns)
                    with conn.cursor(name=f"samsa_snapshot_{tables.index(t)}") as cur:
                        cur.execute(sql.SQL("SELECT {} FROM {}").format(cols, sql.Identifier(t.schema, t.name)))
                        while chunk := cur.fetchmany(1000):
                            for r in chunk:
                                yield t, [("t" if v is not None else "n", v) for v in r]
            previous = None
            for item in rows():
                if previous is not None:
                    yield self._snapshot_record(*previous, lsn, xid, ts_ms, False, redo)
                previous = item
            if previous is not None:
                yield self._snapshot_record(*previous, lsn, xid, ts_ms, True, redo)
            conn.commit()
        finally:
            conn.close()
        log.info("Snapshot completed; streaming from LSN %s", lsn_str(lsn))
        self.skip_to = (lsn - 1, 10 ** 9)  # transactions committed from the consistent point on are new
        self._start_streaming()

    def _snapshot_record(self, table: Table, values: list, lsn: int, xid: int, ts_ms: int, last: bool,
                         redo: bool) -> SourceRecord:
        row = table.row(values)
        source = self._source(table, ts_ms, "last" if last else "true", xid, lsn, None)
        offset = {"lsn": lsn, "txId": xid, "ts_usec": ts_ms * 1000, "snapshot": True,
                  "last_snapshot_record": last}
        return self._record(table, None, row, "r", source, offset, redo)

    # ---------------------------------------------------------------- streaming

    def _start_streaming(self) -> None:
        assert self.repl is not None
        self.repl.start(self.slot, self.publication)

    def _source(self, table: Table, ts_ms: int, snapshot: str, xid: int | None, lsn: int | None,
                sequence: str | None) -> dict[str, Any]:
        return {"version": VERSION, "connector": "postgresql", "name": self.prefix, "ts_ms": ts_ms,
                "snapshot": snapshot, "db": self.dbname, "sequence": sequence, "schema": table.schema,
                "table": table.name, "txId": xid, "lsn": lsn, "xmin": None}

    def _record(self, table: Table, before: dict | None, after: dict | None, op: str, source: dict,
                offset: dict, duplicate: bool) -> SourceRecord:
        value = {"before": before, "after": after, "source": source, "op": op, "ts_ms": int(time.time() * 1000),
                 "transaction": None}
        headers = [(DUPLICATE_HEADER, b"true")] if duplicate else []
        return SourceRecord(table.topic, None, table.key_schema, table.key(after if after is not None else before),
                            table.envelope, value, None, headers, self.partition, offset)

    def poll(self) -> list[SourceRecord] | None:
        if self.snapshot_rows is not None:
            out = []
            for record in self.snapshot_rows:
                out.append(record)
                if len(out) >= self.batch:
                    return out
            self.snapshot_rows = None
            if self.props.get("snapshot.mode") == "initial_only":
                self.repl.close()
                self.repl = None
            return out
        if self.repl is None:
            time.sleep(self.poll_timeout)
            return None
        out: list[SourceRecord] = []
        timeout = self.poll_timeout
        while len(out) < self.batch:
            data = self.repl.read(timeout)
            if data is None:
                break
            message = decode(data.payload)
            if isinstance(message, Begin):
                self.tx, self.tx_event = message, 0
            elif isinstance(message, Relation):
                self.relations[message.relid] = message
                if self._captured(message.schema, message.table):
                    self._table(message.schema, message.table, refresh=True)
            elif isinstance(message, Change) and self.tx is not None:
                self.tx_event += 1
                out.extend(self._change(message, data.start))
            elif isinstance(message, Commit):
                self.tx = None
                self.confirmable = message.end_lsn
                if out:
                    timeout = 0  # hand over what we have unless more is already waiting
        return out

    def _change(self, change: Change, lsn: int) -> list[SourceRecord]:
        tx = self.tx
        assert tx is not None
        if (tx.final_lsn, self.tx_event) <= self.skip_to:
            return []
        rel = self.relations.get(change.relid)
        if rel is None or not self._captured(rel.schema, rel.table):
            return []
        table = self._table(rel.schema, rel.table)
        before = table.row(change.old) if change.old is not None else None
        after = table.row(change.new) if change.new is not None else None
        sequence = f'["{tx.final_lsn}","{lsn}"]'
        source = self._source(table, tx.commit_ts // 1000, "false", tx.xid, lsn, sequence)
        offset = {"lsn_proc": lsn, "lsn_commit": tx.final_lsn, "lsn": lsn, "txId": tx.xid, "ts_usec": tx.commit_ts,
                  "event": self.tx_event}
        duplicate = tx.final_lsn < self.horizon
        out = [self._record(table, before, after, change.op, source, offset, duplicate)]
        if change.op == "d" and self.tombstones:
            tomb = SourceRecord(table.topic, None, table.key_schema, table.key(before), None, None, None,
                                list(out[0].headers), self.partition, offset)
            out.append(tomb)
        return out

    def commit(self) -> None:
        """The offsets of everything polled are stored: the slot may forget what came before."""
        if self.repl is not None and self.confirmable:
            self.repl.feedback(self.confirmable)

    def stop(self) -> None:
        if self.repl is not None:
            self.repl.close()
        try:
            if self.props.get("slot.drop.on.stop", "false").lower() == "true":
                self.sql.execute("SELECT pg_drop_replication_slot(%s)", (self.slot,))
        finally:
            self.sql.close()
