"""Share groups on one broker (KIP-932), records/s through ShareFetch (not a test).

``python bench/share_fetch_bench.py [--records 200000] [--size 100] [--partitions 1]``
against a fresh ``samsa server start`` process: the topic is filled first, then each row
consumes all of it with a fresh group and reports records/s from the first poll to the last
record: confluent-kafka ``ShareConsumer``s (1, 2 and 4, implicit acknowledgement: each
record accepted at the next poll), and one classic ``Consumer`` for comparison. The share
consumers run in threads of this process (librdkafka releases the GIL while it waits).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


sys.path.insert(0, str(ROOT / "tests"))


def fill(bootstrap: str, topic: str, partitions: int, records: int, size: int) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(topic, partitions, 1)])[topic].result(60)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 262144})
    value = b"x" * size
    for i in range(records):
        while True:
            try:
                p.produce(topic, value, partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
    p.flush(120)


def earliest(bootstrap: str, group: str) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    r = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in a.incremental_alter_configs([r]).values():
        f.result(60)


def share_run(bootstrap: str, topic: str, records: int, consumers: int) -> float:
    group = f"bench-share-{uuid.uuid4().hex[:8]}"
    earliest(bootstrap, group)
    lock = threading.Lock()
    seen = [0]
    times: list[float] = []
    done = threading.Event()

    def work() -> None:
        c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
        c.subscribe([topic])
        try:
            while not done.is_set():
                batch = c.poll(0.5)
                n = sum(1 for m in batch if m.error() is None)
                if n:
                    with lock:
                        if not times:
                            times.append(time.perf_counter())
                        seen[0] += n
                        if seen[0] >= records:
                            times.append(time.perf_counter())
                            done.set()
        finally:
            c.close()
    threads = [threading.Thread(target=work) for _ in range(consumers)]
    for t in threads:
        t.start()
    done.wait(600)
    for t in threads:
        t.join(60)
    return records / (times[1] - times[0])


def classic_run(bootstrap: str, topic: str, records: int) -> float:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-classic-{uuid.uuid4().hex[:8]}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": True})
    c.subscribe([topic])
    seen, first = 0, None
    try:
        while seen < records:
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    first = first or time.perf_counter()
                    seen += 1
        return records / (time.perf_counter() - first)
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1)
    args = ap.parse_args()
    from broker_process import BrokerProcess
    with tempfile.TemporaryDirectory() as d:
        broker = BrokerProcess(Path(d)).start()
        try:
            topic = "bench-share"
            fill(broker.bootstrap, topic, args.partitions, args.records, args.size)
            print(f"{args.records} records of {args.size} bytes, {args.partitions} partition(s)")
            print("| consumers | records/s |\n|---|---|")
            for n in (1, 2, 4):
                print(f"| {n} ShareConsumer{'s' if n > 1 else ''} | {share_run(broker.bootstrap, topic, args.records, n):,.0f} |",
                      flush=True)
            print(f"| 1 classic Consumer | {classic_run(broker.bootstrap, topic, args.records):,.0f} |")
        finally:
            broker.stop()


if __name__ == "__main__":
    main()
