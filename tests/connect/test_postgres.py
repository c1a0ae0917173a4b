"""PostgreSQL change data capture and the JDBC sink: a throwaway PostgreSQL with wal_level=logical,
a real broker and standalone worker processes (SIGKILLed where the issue says)."""

from __future__ import annotations

import json
import threading

import pytest

from broker_process import BrokerProcess
from connect_helpers import WorkerProcess
from pg_server import PostgresServer
from waiting import wait_until

psycopg = pytest.importorskip("psycopg")

DUP = "samsa.cdc.possible.duplicate"


@pytest.fixture(scope="module")
def pg():
    server = PostgresServer(wal_level="logical", max_replication_slots=8, max_wal_senders=8).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def kafka(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


def _worker_props(kafka, tmp_path, schemas: bool = True) -> dict[str, str]:
    return {"bootstrap.servers": kafka.bootstrap,
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": str(schemas).lower(), "value.converter.schemas.enable": str(schemas).lower(),
            "offset.storage.file.filename": str(tmp_path / "connect.offsets"), "offset.flush.interval.ms": "300",
            # A SIGKILLed worker's sink consumer stays in its group until its session expires, and the
            # restarted worker's consumer waits for that rebalance: 6 s (the broker's least) and not 45 s.
            "consumer.session.timeout.ms": "6000"}


def _cdc_props(pg, name: str, prefix: str, tables: str, slot: str) -> str:
    return (f"name={name}\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\n"
            f"plugin.name=pgoutput\ndatabase.hostname=127.0.0.1\ndatabase.port={pg.port}\n"
            f"database.user={pg.user}\ndatabase.dbname=postgres\ntopic.prefix={prefix}\n"
            f"table.include.list={tables}\nslot.name={slot}\npublication.name={slot}_pub\n"
            "publication.autocreate.mode=filtered\nsnapshot.mode=initial\n")


class TopicReader:
    """Reads a topic from the start, keeping every record (value parsed from JsonConverter's JSON)."""

    def __init__(self, bootstrap: str, topic: str):
        from samsa.client.consumer import Consumer
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest",
                                  "group.id": f"reader-{topic}", "enable.auto.commit": False})
        self.consumer.subscribe([topic])
        self.records: list = []

    def read(self) -> list:
        for r in self.consumer.poll(0.3):
            self.records.append(r)
        return self.records

    def events(self) -> list[tuple[dict | None, dict | None, dict]]:
        """(key payload, value payload, headers) of each record."""
        out = []
        for r in self.read():
            key = json.loads(r.key)["payload"] if r.key else None
            value = json.loads(r.value)["payload"] if r.value else None
            out.append((key, value, dict(r.headers or [])))
        return out

    def close(self) -> None:
        self.consumer.close()


def test_cdc_envelope_commit_order_and_sigkill_resume(pg, kafka, tmp_path):
    db = psycopg.connect(pg.dsn, autocommit=True)
    db.execute("CREATE TABLE customers (id int PRIMARY KEY, name text NOT NULL, balance numeric(10,2), "
               "joined date)")
    db.execute("ALTER TABLE customers REPLICA IDENTITY FULL")
    db.execute("CREATE TABLE counter (id int PRIMARY KEY, n int)")
    db.execute("CREATE TABLE ignored (id int PRIMARY KEY)")
    db.execute("INSERT INTO customers VALUES (1, 'ada', 10.50, '2024-01-02'), (2, 'bob', NULL, NULL)")
    db.execute("INSERT INTO counter VALUES (1, 0)")
    conn_file = tmp_path / "pg-source.properties"
    conn_file.write_text(_cdc_props(pg, "pg-source", "dbserver1", "public.customers,public.counter", "cdc1"))
    props = _worker_props(kafka, tmp_path)
    worker = WorkerProcess("standalone", tmp_path / "w1", props, [conn_file]).start()
    reader = TopicReader(kafka.bootstrap, "dbserver1.public.customers")
    try:
        # the snapshot: op r, then inserts, updates and deletes in commit order
        wait_until(lambda: len(reader.events()) >= 2, "the snapshot's two rows", 60)
        db.execute("INSERT INTO customers VALUES (3, 'cy', 1.25, NULL)")
        with db.transaction():
            db.execute("UPDATE customers SET name = 'bobby', balance = 7 WHERE id = 2")
            db.execute("DELETE FROM customers WHERE id = 1")
        db.execute("INSERT INTO ignored VALUES (1)")
        events = wait_until(lambda: (e := reader.events()) and len(e) >= 6 and e, "the change events", 60)
        ops = [(v or {}).get("op") for _, v, _ in events]
        assert ops == ["r", "r", "c", "u", "d", None], ops
        (k0, r0, _), (_, r1, _), (k2, c, _), (k3, u, _), (k4, d, _), (k5, tomb, _) = events[:6]
        assert k0 == {"id": 1} and r0["after"] == {"id": 1, "name": "ada", "balance": "BBo=", "joined": 19724}
        assert r0["before"] is None and r1["source"]["snapshot"] == "last"
        assert c["after"]["name"] == "cy" and c["before"] is None and k2 == {"id": 3}
        assert u["before"]["name"] == "bob" and u["after"]["name"] == "bobby" and k3 == {"id": 2}
        assert d["before"]["id"] == 1 and d["after"] is None and k4 == {"id": 1} and k5 == {"id": 1} and tomb is None
        src = u["source"]
        assert src["connector"] == "postgresql" and src["name"] == "dbserver1" and src["db"] == "postgres"
        assert (src["schema"], src["table"]) == ("public", "customers") and src["snapshot"] == "false"
        assert src["txId"] == d["source"]["txId"] and src["lsn"] < d["source"]["lsn"]  # one transaction, in order
        assert isinstance(src["ts_ms"], int) and isinstance(u["ts_ms"], int)

        # SIGKILL while transactions commit; each inserts a row and increments the counter
        committed: list[int] = []
        stop = threading.Event()

        def write() -> None:
            w = psycopg.connect(pg.dsn, autocommit=True)
            i = 0
            while not stop.is_set() and i < 100_000:
                i += 1
                with w.transaction():
                    w.execute("INSERT INTO customers VALUES (%s, %s, NULL, NULL)", (100 + i, f"n{i}"))
                    w.execute("UPDATE counter SET n = %s WHERE id = 1", (i,))
                committed.append(i)
                stop.wait(0.002)  # pace the load: a few hundred transactions a second, not a burst
            w.close()

        def stored_streaming_offset() -> bool:
            offsets = json.loads((tmp_path / "connect.offsets").read_text())
            return any("lsn_commit" in v for v in offsets.values())
        writer = threading.Thread(target=write)
        writer.start()
        try:
            wait_until(stored_streaming_offset, "a streaming offset stored", 60)
            worker.kill()
            killed_at = len(committed)
            wait_until(lambda: len(committed) >= killed_at + 50, "changes while the worker is down", 60)
            worker = WorkerProcess("standalone", tmp_path / "w2", props, [conn_file]).start()
            wait_until(lambda: len(committed) >= killed_at + 200, "changes after the restart", 60)
        finally:
            stop.set()
            writer.join(60)
        n = len(committed)
        assert 0 < killed_at < n < 100_000, (killed_at, n)

        def inserts() -> list[tuple[int, dict]]:
            return [(v["source"]["lsn"], v, h) for _, v, h in reader.events()[6:] if v and v["op"] == "c"]
        wait_until(lambda: len({lsn for lsn, _, _ in inserts()}) >= n, "every committed insert", 120)
        seen: set[tuple[int, int]] = set()
        unique: list[int] = []
        for lsn, v, headers in inserts():
            ident = (v["source"]["txId"], lsn)
            if ident in seen:
                assert headers.get(DUP) == b"true", f"an unmarked duplicate: {v}"
                continue
            seen.add(ident)
            unique.append(v["after"]["id"])
        assert unique == [100 + i for i in range(1, n + 1)], "lost or reordered changes"
        unmarked = [(v["source"]["txId"], lsn) for lsn, v, h in inserts() if DUP not in h]
        assert len(unmarked) == len(set(unmarked))
        # the slot's confirmed LSN moves only after offsets are stored, and does move
        wait_until(lambda: db.execute("SELECT confirmed_flush_lsn > '0/0' FROM pg_replication_slots "
                                      "WHERE slot_name = 'cdc1'").fetchone()[0], "the slot's confirmed LSN")
    finally:
        reader.close()
        worker.stop()
        db.close()


def test_cdc_to_jdbc_sink_tables_equal_after_restart(pg, kafka, tmp_path):
    db = psycopg.connect(pg.dsn, autocommit=True)
    db.execute("CREATE TABLE orders (id int PRIMARY KEY, item text NOT NULL, qty int, price numeric(8,2), "
               "placed timestamp)")
    db.execute("INSERT INTO orders SELECT g, 'item' || g, g, g * 1.5, '2024-05-01 10:00:00' FROM "
               "generate_series(1, 20) g")
    source = tmp_path / "orders-source.properties"
    source.write_text(_cdc_props(pg, "orders-source", "shop", "public.orders", "cdc2"))
    sink = tmp_path / "orders-sink.properties"
    sink.write_text("name=orders-sink\nconnector.class=io.confluent.connect.jdbc.JdbcSinkConnector\n"
                    f"topics=shop.public.orders\nconnection.url=jdbc:postgresql://127.0.0.1:{pg.port}/postgres\n"
                    f"connection.user={pg.user}\ntable.name.format=orders_copy\ninsert.mode=upsert\n"
                    "pk.mode=record_key\npk.fields=id\ndelete.enabled=true\nauto.create=true\n"
                    "transforms=unwrap\ntransforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState\n"
                    "transforms.unwrap.drop.tombstones=false\n")
    props = _worker_props(kafka, tmp_path)
    worker = WorkerProcess("standalone", tmp_path / "w1", props, [source, sink]).start()

    def table(name: str) -> list[tuple]:
        return db.execute(f"SELECT id, item, qty, price, placed FROM {name} ORDER BY id").fetchall()

    def equal() -> bool:
        try:
            return table("orders") == table("orders_copy")
        except psycopg.errors.UndefinedTable:
            return False
    try:
        # bad input: Kafka Connect's error JSON
        code, body = worker.request("POST", "/connectors", {"name": "bad", "config": {
            "connector.class": "PostgresConnector", "plugin.name": "pgoutput"}})
        assert code == 400 and body["error_code"] == 400 and "topic.prefix" in body["message"], body
        code, body = worker.request("PUT", "/connector-plugins/JdbcSinkConnector/config/validate", {
            "connector.class": "JdbcSinkConnector", "connection.url": "jdbc:postgresql://h/db", "topics": "t",
            "delete.enabled": "true", "pk.mode": "record_value"})
        assert code == 200 and body["error_count"] >= 1, body

        wait_until(equal, "the snapshot copied", 90)
        db.execute("UPDATE orders SET qty = qty + 100 WHERE id % 3 = 0")
        db.execute("DELETE FROM orders WHERE id % 5 = 0")
        db.execute("INSERT INTO orders VALUES (21, 'new', 1, 2.25, NULL)")
        wait_until(equal, "inserts, updates and deletes copied", 60)
        wait_until(lambda: "lsn_commit" in (tmp_path / "connect.offsets").read_text(), "streaming offsets stored")
        worker.kill()  # redelivery after the restart must leave the copy equal
        db.execute("UPDATE orders SET item = 'changed while down' WHERE id < 5")
        db.execute("DELETE FROM orders WHERE id = 21")
        worker = WorkerProcess("standalone", tmp_path / "w2", props, [source, sink]).start()
        db.execute("INSERT INTO orders VALUES (22, 'after restart', 2, 3.00, '2024-06-01 00:00:00.25')")
        wait_until(equal, "the copy equal to the source table after the restart", 90)
        assert len(table("orders_copy")) == 17
    finally:
        worker.stop()
        db.close()


def test_cdc_source_writes_avro_through_the_schema_registry(pg, kafka, tmp_path):
    """Debezium's deployment with Confluent's AvroConverter: the CDC source writes Avro (ids from a
    `samsa schema-registry`), confluent-kafka's AvroDeserializer reads it, and the JDBC sink reads
    it back with the same converter into a copy of the table."""
    import decimal

    from confluent_kafka import Consumer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from registry_process import RegistryProcess

    registry = RegistryProcess(tmp_path / "registry", kafka.bootstrap,
                               **{"schema.registry.group.session.timeout.ms": "10000"}).start()
    db = psycopg.connect(pg.dsn, autocommit=True)
    db.execute("CREATE TABLE payments (id int PRIMARY KEY, payer text NOT NULL, amount numeric(10,2), "
               "paid date)")
    db.execute("ALTER TABLE payments REPLICA IDENTITY FULL")
    db.execute("INSERT INTO payments VALUES (1, 'ada', 12.50, '2024-03-04'), (2, 'bob', NULL, NULL)")
    source = tmp_path / "pay-source.properties"
    source.write_text(_cdc_props(pg, "pay-source", "avro", "public.payments", "cdc3"))
    sink = tmp_path / "pay-sink.properties"
    sink.write_text("name=pay-sink\nconnector.class=io.confluent.connect.jdbc.JdbcSinkConnector\n"
                    f"topics=avro.public.payments\nconnection.url=jdbc:postgresql://127.0.0.1:{pg.port}/postgres\n"
                    f"connection.user={pg.user}\ntable.name.format=payments_copy\ninsert.mode=upsert\n"
                    "pk.mode=record_key\npk.fields=id\ndelete.enabled=true\nauto.create=true\n"
                    "transforms=unwrap\ntransforms.unwrap.type=io.debezium.transforms.ExtractNewRecordState\n"
                    "transforms.unwrap.drop.tombstones=false\n")
    props = {**_worker_props(kafka, tmp_path),
             "key.converter": "io.confluent.connect.avro.AvroConverter",
             "value.converter": "io.confluent.connect.avro.AvroConverter",
             "key.converter.schema.registry.url": registry.url, "value.converter.schema.registry.url": registry.url}
    worker = WorkerProcess("standalone", tmp_path / "w1", props, [source, sink]).start()
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": "avro-cdc-reader",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        consumer.subscribe(["avro.public.payments"])
        sr = SchemaRegistryClient({"url": registry.url})
        de = AvroDeserializer(sr)
        ctx = SerializationContext("avro.public.payments", MessageField.VALUE)
        raw: list[bytes] = []

        def read() -> list[bytes]:
            raw.extend(m.value() for m in consumer.consume(10, 0.3) if not m.error() and m.value() is not None)
            return raw
        wait_until(lambda: len(read()) >= 2, "the snapshot, in Avro", 90)
        db.execute("UPDATE payments SET amount = 3.25 WHERE id = 2")
        wait_until(lambda: len(read()) >= 3, "the update, in Avro", 60)
        events = [de(v, ctx) for v in raw]
        assert [e["op"] for e in events[:3]] == ["r", "r", "u"]
        assert events[0]["after"]["payer"] == "ada" and events[0]["after"]["amount"] == decimal.Decimal("12.50")
        assert events[2]["before"]["amount"] is None and events[2]["after"]["amount"] == decimal.Decimal("3.25")
        assert events[0]["source"]["table"] == "payments"
        assert "avro.public.payments-value" in sr.get_subjects() and "avro.public.payments-key" in sr.get_subjects()

        def copied() -> bool:
            try:
                return (db.execute("SELECT id, payer, amount, paid FROM payments ORDER BY id").fetchall()
                        == db.execute("SELECT id, payer, amount, paid FROM payments_copy ORDER BY id").fetchall())
            except psycopg.errors.UndefinedTable:
                return False
        wait_until(copied, "the JDBC sink's copy, read back through the AvroConverter", 60)
    finally:
        consumer.close()
        worker.stop()
        registry.stop()
        db.close()
