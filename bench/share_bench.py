"""Records/s through a share group (KIP-932) of 1, 2 and 4 consumers against a classic consumer
group of as many, on a fresh Samsa broker process and on Apache Kafka 4.4.0 (not a test).

    .venv/bin/python bench/share_bench.py [--records 50000] [--partitions 4] [--targets samsa,kafka]

A 4-partition topic gets ``--records`` records of 100 bytes first; then each group reads them all
from the start, each consumer a process of its own (confluent-kafka 2.16's ``ShareConsumer``,
implicit acknowledgement, and its ``Consumer``, auto-commit). Two rates: records / the time from
the consumers' start to the moment the group has every record (joining included: the share
group's assignment comes with the coordinator's heartbeats, the classic group rebalances, as a
worker pool starting against a backlog sees it), and records / the time from the first record
to the last. One more row: Samsa's own
``ShareConsumer`` (one process) on each broker.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "bench"))

from share_common import set_share_group_config, stop_processes  # noqa: E402

WAIT = 300.0


def _count(counter, first, n: int) -> None:
    with counter.get_lock():
        if counter.value == 0:
            first.value = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process
        counter.value += n


def consume(kind: str, bootstrap: str, group: str, topic: str, counter, first, stop) -> None:
    """One consumer process: counts what it gets into ``counter`` until ``stop`` is set."""
    if kind == "samsa-share":
        from samsa.client.share_consumer import ShareConsumer as SamsaShare
        c = SamsaShare({"bootstrap.servers": bootstrap, "group.id": group, "max.poll.records": 2000})
        c.subscribe([topic])
        while not stop.is_set():
            n = len(c.poll(0.2))
            if n:
                _count(counter, first, n)
        c.close()
        return
    from share_common import confluent_reader
    c, read = confluent_reader(kind, bootstrap, group, topic, batch=1000, share_config={"max.poll.records": 2000})
    while not stop.is_set():
        n = len(read())
        if n:
            _count(counter, first, n)
    c.close()


def run_group(kind: str, bootstrap: str, topic: str, consumers: int, records: int) -> tuple[float, float]:
    """(records/s from the consumers' start, records/s from the first record) for one group."""
    group = f"bench-{kind}-{consumers}-{uuid.uuid4().hex[:6]}"
    if kind != "classic":
        set_share_group_config(bootstrap, group)
    ctx = mp.get_context("spawn")
    counter, first, stop = ctx.Value("q", 0), ctx.Value("d", 0.0), ctx.Event()
    procs = [ctx.Process(target=consume, args=(kind, bootstrap, group, topic, counter, first, stop))
             for _ in range(consumers)]
    start = time.monotonic()
    for p in procs:
        p.start()
    deadline = start + WAIT
    while counter.value < records and time.monotonic() < deadline:
        time.sleep(0.02)
    end = time.monotonic()
    got = counter.value
    stop_processes(procs, stop)
    if got < records:
        return float("nan"), float("nan")
    return records / (end - start), records / max(end - first.value, 1e-6)


def fill(bootstrap: str, topic: str, partitions: int, records: int, admin) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import NewTopic
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(WAIT)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    value = b"x" * 100
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(WAIT) == 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--targets", default="samsa,kafka")
    args = ap.parse_args()
    from confluent_kafka.admin import AdminClient
    import kafka_process
    from broker_process import BrokerProcess
    rows = []
    for target in args.targets.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            server = (BrokerProcess(Path(tmp)) if target == "samsa" else kafka_process.KafkaProcess(Path(tmp))).start()
            try:
                admin = AdminClient({"bootstrap.servers": server.bootstrap})
                topic = f"bench-share-{uuid.uuid4().hex[:6]}"
                fill(server.bootstrap, topic, args.partitions, args.records, admin)
                for kind, counts in (("share", (1, 2, 4)), ("classic", (1, 2, 4)), ("samsa-share", (1,))):
                    for n in counts:
                        rate, steady = run_group(kind, server.bootstrap, topic, n, args.records)
                        rows.append((target, kind, n, rate, steady))
                        print(f"{target:6} {kind:12} {n} consumers: {rate:,.0f} records/s with the join, "
                              f"{steady:,.0f} from the first record", flush=True)
            finally:
                server.stop()
    print("\n| broker | group | consumers | records/s with the join | from the first record |\n|---|---|---|---|---|")
    for target, kind, n, rate, steady in rows:
        name = {"share": "share (confluent-kafka)", "classic": "classic (confluent-kafka)",
                "samsa-share": "share (Samsa's ShareConsumer)"}[kind]
        print(f"| {target} | {name} | {n} | {rate:,.0f} | {steady:,.0f} |")


if __name__ == "__main__":
    main()
