"""Samsa's Producer beside kafka-python's and confluent-kafka's, same broker process, same run.

    .venv/bin/python bench/producer_compare.py [--records 200000]

100-byte values, linger.ms=5, acks=all (each client's default idempotence setting).
Prints records/s per client. Not a test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from broker_process import BrokerProcess  # noqa: E402

VALUE = b"x" * 100


def samsa_client(bootstrap: str, topic: str, n: int) -> float:
    from samsa.client.producer import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    p.send(topic, b"warm").result(30)
    t0 = time.perf_counter()
    for _ in range(n):
        p.send(topic, VALUE)
    p.flush()
    dt = time.perf_counter() - t0
    p.close()
    return n / dt


def kafka_python(bootstrap: str, topic: str, n: int) -> float:
    from kafka import KafkaProducer
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks="all")
    p.send(topic, b"warm").get(30)
    t0 = time.perf_counter()
    for _ in range(n):
        p.send(topic, VALUE)
    p.flush()
    dt = time.perf_counter() - t0
    p.close()
    return n / dt


def confluent(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, VALUE)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    p.flush()
    return n / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    args = ap.parse_args()
    broker = BrokerProcess(Path(tempfile.mkdtemp()), **{"num.partitions": 3}).start()
    try:
        results = {name: fn(broker.bootstrap, f"perf-{name}", args.records)
                   for name, fn in (("samsa", samsa_client), ("kafka-python", kafka_python),
                                    ("confluent-kafka", confluent))}
    finally:
        broker.stop()
    base = results["kafka-python"]
    print(f"{'client':<16} {'records/s':>10} {'vs kafka-python':>16}")
    for name, rate in results.items():
        print(f"{name:<16} {rate:>10,.0f} {rate / base:>15.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
