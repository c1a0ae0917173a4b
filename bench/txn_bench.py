"""Transactions' cost, in one run on one broker process: the transactional producer (transactions
of 100 and of 10,000 records) beside the idempotent producer on the same load, and a consumer
reading the committed records read_committed beside read_uncommitted.

    .venv/bin/python bench/txn_bench.py [--records 200000] [--client confluent|samsa]

100-byte values, linger.ms=5, acks=all. Prints records/s per case, the best of ``--rounds``.
Not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

VALUE = b"x" * 100


def produce_confluent(bootstrap: str, topic: str, n: int, per_txn: int | None) -> float:
    from confluent_kafka import Producer
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": True}
    if per_txn:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    if per_txn:
        p.init_transactions(30)
    p.produce(topic, b"warm") if not per_txn else None
    p.flush(30)
    t0 = time.perf_counter()
    for i in range(n):
        if per_txn and i % per_txn == 0:
            if i:
                p.commit_transaction(60)
            p.begin_transaction()
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    if per_txn:
        p.commit_transaction(60)
    p.flush(60)
    return n / (time.perf_counter() - t0)


def produce_samsa(bootstrap: str, topic: str, n: int, per_txn: int | None) -> float:
    from samsa.client.producer import Producer
    conf = {"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"}
    if per_txn:
        conf["transactional.id"] = f"bench-{uuid.uuid4().hex[:8]}"
    p = Producer(conf)
    if per_txn:
        p.init_transactions(30)
    else:
        p.send(topic, b"warm").result(30)
    t0 = time.perf_counter()
    for i in range(n):
        if per_txn and i % per_txn == 0:
            if i:
                p.commit_transaction(60)
            p.begin_transaction()
        p.send(topic, VALUE)
    if per_txn:
        p.commit_transaction(60)
    p.flush()
    dt = time.perf_counter() - t0
    p.close()
    return n / dt


def consume(bootstrap: str, topic: str, n: int, isolation: str) -> float:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    while got < n:
        for m in c.consume(1000, 1.0):
            if not m.error():
                got += 1
    dt = time.perf_counter() - t0
    c.close()
    return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--client", choices=("confluent", "samsa"), default="confluent")
    opts = ap.parse_args()
    produce = produce_confluent if opts.client == "confluent" else produce_samsa
    from confluent_kafka.admin import AdminClient, NewTopic
    with tempfile.TemporaryDirectory() as tmp:
        b = BrokerProcess(Path(tmp)).start()
        try:
            admin = AdminClient({"bootstrap.servers": b.bootstrap})
            cases = {"idempotent": None, "transactions of 100": 100, "transactions of 10,000": 10_000}
            best: dict[str, float] = {}
            topics: dict[str, str] = {}
            for r in range(opts.rounds):
                for name, per_txn in cases.items():
                    topic = f"bench-{r}-{per_txn or 0}"
                    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
                    rate = produce(b.bootstrap, topic, opts.records, per_txn)
                    best[name] = max(best.get(name, 0.0), rate)
                    topics[name] = topic
            print(f"producer ({opts.client}), {opts.records} records of 100 B, best of {opts.rounds}:")
            for name, rate in best.items():
                print(f"  {name:<24} {rate:>10,.0f} records/s")
            topic = topics["transactions of 100"]
            reads: dict[str, float] = {}
            for _ in range(opts.rounds):
                for iso in ("read_uncommitted", "read_committed"):
                    reads[iso] = max(reads.get(iso, 0.0), consume(b.bootstrap, topic, opts.records, iso))
            print("consumer (confluent) of the topic written in transactions of 100:")
            for iso, rate in reads.items():
                print(f"  {iso:<24} {rate:>10,.0f} records/s")
        finally:
            b.stop()


if __name__ == "__main__":
    main()
