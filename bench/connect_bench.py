"""Kafka Connect and MirrorMaker 2 throughput, each beside the direct-client rate, in one run.

``python bench/connect_bench.py [--records 50000]`` starts its own broker processes, worker
processes and a throwaway PostgreSQL (tests' helpers) and prints:

- file pipeline: FileStreamSource → topic → FileStreamSink (one standalone worker, StringConverter,
  offset.flush.interval.ms 500 since the sink flushes its file at each commit), lines/s from writing the source file to the last line in the sink file; beside it, Samsa's
  Producer then Consumer moving the same lines through a topic in one process.
- CDC: rows inserted (1000 per transaction) → Debezium change events on the topic (JsonConverter
  with schemas), events/s until the topic's end offset holds them all; beside it, Samsa's Producer
  sending the same number of records of the events' size.
- MirrorMaker: records produced into cluster A while ``samsa mirror-maker`` runs → the remote
  topic in B, records/s until B holds them all; beside it, a Consumer on A feeding a Producer on B
  in one process (what MirrorSource does, without Connect).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (ROOT, ROOT / "tests", ROOT / "tests" / "connect"):
    sys.path.insert(0, str(p))

from broker_process import BrokerProcess  # noqa: E402
from connect_helpers import MirrorMakerProcess, WorkerProcess  # noqa: E402
from waiting import wait_until  # noqa: E402

from samsa.client.admin import Admin  # noqa: E402
from samsa.client.consumer import Consumer  # noqa: E402
from samsa.client.producer import Producer  # noqa: E402
from samsa.client.types import NewTopic, TopicPartition  # noqa: E402

WAIT = 600


def end_offset(bootstrap: str, topic: str, partitions: int = 1) -> int:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        got = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(partitions)})
        return sum(v.offset for v in got.values())


def direct(bootstrap: str, topic: str, values: list[bytes], consume: bool = True) -> float:
    """Records/s of Samsa's Producer sending ``values`` (then a Consumer reading them back)."""
    start = time.perf_counter()
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as p:
        for v in values:
            p.send(topic, v)
        p.flush(WAIT)
    if consume:
        with Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "earliest", "enable.auto.commit": False}) as c:
            c.assign([TopicPartition(topic, 0)])
            n = 0
            while n < len(values):
                n += len(c.poll(1.0))
    return len(values) / (time.perf_counter() - start)


def file_pipeline(broker: BrokerProcess, tmp: Path, n: int) -> tuple[float, float]:
    lines = [f"line {i:08d} " + "x" * 80 for i in range(n)]
    source, sink = tmp / "source.txt", tmp / "sink.txt"
    # FileStreamSink flushes its file at each offset commit, as Kafka's: commit every 500 ms
    props = {"bootstrap.servers": broker.bootstrap, "offset.storage.file.filename": str(tmp / "offsets"),
             "offset.flush.interval.ms": "500", "key.converter": "org.apache.kafka.connect.storage.StringConverter",
             "value.converter": "org.apache.kafka.connect.storage.StringConverter"}
    (tmp / "src.properties").write_text(f"name=src\nconnector.class=FileStreamSource\nfile={source}\n"
                                        "topic=bench-file\n")
    (tmp / "snk.properties").write_text(f"name=snk\nconnector.class=FileStreamSink\nfile={sink}\n"
                                        "topics=bench-file\n")
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.create_topics([NewTopic("bench-file", 1, 1), NewTopic("bench-file-direct", 1, 1)])
    worker = WorkerProcess("standalone", tmp / "w", props, [tmp / "src.properties", tmp / "snk.properties"]).start()
    try:
        wait_until(lambda: worker.request("GET", "/connectors/snk/status")[1]["tasks"][0]["state"] == "RUNNING")
        start = time.perf_counter()
        source.write_text("\n".join(lines) + "\n")

        def count() -> int:
            with open(sink, "rb") as f:
                return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        wait_until(lambda: sink.exists() and count() >= n, "the sink file", WAIT, 0.01)
        connect_rate = n / (time.perf_counter() - start)
    finally:
        worker.stop()
    return connect_rate, direct(broker.bootstrap, "bench-file-direct", [s.encode() for s in lines])


def cdc(broker: BrokerProcess, tmp: Path, n: int) -> tuple[float, float]:
    import psycopg
    from pg_server import PostgresServer
    pg = PostgresServer(wal_level="logical", max_replication_slots=4, max_wal_senders=4).start()
    try:
        db = psycopg.connect(pg.dsn, autocommit=True)
        db.execute("CREATE TABLE items (id int PRIMARY KEY, name text, qty int, price numeric(10,2))")
        props = {"bootstrap.servers": broker.bootstrap, "offset.storage.file.filename": str(tmp / "cdc-offsets"),
                 "key.converter": "org.apache.kafka.connect.json.JsonConverter",
                 "value.converter": "org.apache.kafka.connect.json.JsonConverter"}
        (tmp / "cdc.properties").write_text(
            "name=cdc\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\nplugin.name=pgoutput\n"
            f"database.hostname=127.0.0.1\ndatabase.port={pg.port}\ndatabase.user={pg.user}\n"
            "database.dbname=postgres\ntopic.prefix=bench\ntable.include.list=public.items\n"
            "publication.autocreate.mode=filtered\n")
        with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
            admin.create_topics([NewTopic("bench.public.items", 1, 1), NewTopic("bench-cdc-direct", 1, 1)])
        worker = WorkerProcess("standalone", tmp / "cdc-w", props, [tmp / "cdc.properties"]).start()
        try:
            wait_until(lambda: worker.request("GET", "/connectors/cdc/status")[1]["tasks"][0]["state"] == "RUNNING")
            wait_until(lambda: db.execute("SELECT count(*) FROM pg_replication_slots WHERE active").fetchone()[0])
            start = time.perf_counter()
            for lo in range(0, n, 1000):
                db.execute("INSERT INTO items SELECT g, 'item ' || g, g %% 100, g * 0.25 FROM "
                           "generate_series(%s::int, %s::int) g", (lo, min(n, lo + 1000) - 1))
            wait_until(lambda: end_offset(broker.bootstrap, "bench.public.items") >= n, "the change events", WAIT,
                       0.02)
            rate = n / (time.perf_counter() - start)
            with Consumer({"bootstrap.servers": broker.bootstrap, "auto.offset.reset": "earliest"}) as c:
                c.assign([TopicPartition("bench.public.items", 0)])
                sample = wait_until(lambda: c.poll(1.0), "one event")[0].value
        finally:
            worker.stop()
        json.loads(sample)
        return rate, direct(broker.bootstrap, "bench-cdc-direct", [sample] * n, consume=False)
    finally:
        pg.stop()


def mirror(tmp: Path, n: int) -> tuple[float, float]:
    a = BrokerProcess(tmp / "A").start()
    b = BrokerProcess(tmp / "B").start()
    mm = None
    try:
        with Admin({"bootstrap.servers": a.bootstrap}) as admin:
            admin.create_topics([NewTopic("bench", 1, 1), NewTopic("bench-direct", 1, 1)])
        with Admin({"bootstrap.servers": b.bootstrap}) as admin:
            admin.create_topics([NewTopic("bench-direct-copy", 1, 1)])
        values = [f"{i:08d}".encode() + b"y" * 92 for i in range(n)]
        mm = MirrorMakerProcess(tmp / "mm", f"clusters = A, B\nA.bootstrap.servers = {a.bootstrap}\n"
                                            f"B.bootstrap.servers = {b.bootstrap}\nA->B.enabled = true\n"
                                            "A->B.topics = bench\nreplication.factor = 1\n"
                                            "checkpoints.topic.replication.factor = 1\n"
                                            "heartbeats.topic.replication.factor = 1\n"
                                            "offset-syncs.topic.replication.factor = 1\n").start()
        wait_until(lambda: "A.bench" in Admin({"bootstrap.servers": b.bootstrap}).list_topics(), "A.bench", 120)
        start = time.perf_counter()
        with Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 5}) as p:
            for v in values:
                p.send("bench", v)
            p.flush(WAIT)
        wait_until(lambda: end_offset(b.bootstrap, "A.bench") >= n, "the mirrored records", WAIT, 0.02)
        mm_rate = n / (time.perf_counter() - start)

        # direct: the same records through a Consumer on A feeding a Producer on B
        with Producer({"bootstrap.servers": a.bootstrap, "acks": "all", "linger.ms": 5}) as p:
            for v in values:
                p.send("bench-direct", v)
            p.flush(WAIT)
        start = time.perf_counter()
        with Consumer({"bootstrap.servers": a.bootstrap, "auto.offset.reset": "earliest"}) as c, \
                Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5}) as p:
            c.assign([TopicPartition("bench-direct", 0)])
            copied = 0
            while copied < n:
                for r in c.poll(1.0):
                    p.send("bench-direct-copy", r.value, key=r.key, timestamp=r.timestamp,
                           headers=list(r.headers) or None)
                    copied += 1
            p.flush(WAIT)
        return mm_rate, n / (time.perf_counter() - start)
    finally:
        if mm is not None:
            mm.stop()
        a.stop()
        b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="connect-bench-") as d:
        tmp = Path(d)
        broker = BrokerProcess(tmp / "broker").start()
        try:
            rows = [("file source → topic → file sink (lines/s)", *file_pipeline(broker, tmp, args.records)),
                    ("PostgreSQL CDC (events/s)", *cdc(broker, tmp, args.records))]
        finally:
            broker.stop()
        rows.append(("MirrorMaker A → B (records/s)", *mirror(tmp, args.records)))
    print(f"| {'pipeline':46} | {'Connect':>9} | {'direct clients':>14} | ratio |")
    print(f"|{'-' * 48}|{'-' * 11}|{'-' * 16}|-------|")
    for name, connect, direct_rate in rows:
        print(f"| {name:46} | {connect:9,.0f} | {direct_rate:14,.0f} | {connect / direct_rate:5.2f} |")


if __name__ == "__main__":
    main()
