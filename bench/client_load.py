"""The confluent-kafka (Python) loads of the broker benchmark, one per process.

    python bench/client_load.py produce  BOOTSTRAP TOPIC N ACKS [TIMEOUT_S]
    python bench/client_load.py consume  BOOTSTRAP TOPIC N PARTITIONS [TIMEOUT_S]
    python bench/client_load.py latency  BOOTSTRAP TOPIC RATE SECONDS ACKS [TIMEOUT_S]

Each prints one JSON object on stdout: what it did, how long the timed part took, and an
"error" (null when it went right). broker_bench.py runs these in a fresh process per
load so that a client that hangs or crashes costs one load, not the run.

- produce: N records of 100-byte values, keyless, produced as fast as the client takes
  them (poll(0) every 1024 records, poll on a full queue), then flush(); timed from the
  first produce() to the end of flush(). No per-record delivery callback (the parent
  checks the partitions' high watermarks afterwards); an error callback counts errors.
- consume: metadata first, then assign() every partition from the beginning and
  consume(up to 10000, ...) until N records; timed from assign() to the N-th record.
  fetch.queue.backoff.ms=5 (default 1000: once the prefetch queue is full, librdkafka
  would pause a partition for a second, and this loop is slower than the brokers).
- latency: RATE records/s for SECONDS, linger.ms=0, each produced on its schedule (the
  loop sleeps in poll() until the next one is due); latency = delivery callback time -
  produce() time, in ms: p50, p99, p99.9, max.
"""

from __future__ import annotations

import json
import os
import sys
import time

VALUE = b"v" * int(os.environ.get("SAMSA_BENCH_VALUE_BYTES", "100"))  # kafka_compare.py sets 1024 too


def produce(bootstrap: str, topic: str, n: int, acks: str, timeout: float) -> dict:
    from confluent_kafka import Producer
    errors: list[str] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1000000, "queue.buffering.max.kbytes": 1048576,
                  "error_cb": lambda e: errors.append(str(e))})
    if p.list_topics(topic, timeout=10).topics[topic].error is not None:
        return {"error": f"topic {topic} not in metadata"}
    produce_, poll = p.produce, p.poll
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                produce_(topic, VALUE)
                break
            except BufferError:
                poll(0.005)
                if time.monotonic() > deadline:
                    return {"error": f"timeout: queue full after {i} records", "client_errors": errors[:5]}
        if not i & 1023:
            poll(0)
    left = p.flush(max(deadline - time.monotonic(), 1))
    t1 = time.perf_counter()
    out = {"records": n, "seconds": t1 - t0, "client_errors": errors[:5], "error": None}
    if left:
        out["error"] = f"timeout: {left} records still undelivered after flush"
    return out


def consume(bootstrap: str, topic: str, n: int, partitions: int, timeout: float) -> dict:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    errors: list[str] = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "samsa-bench", "enable.auto.commit": False,
                  "enable.auto.offset.store": False, "enable.partition.eof": False,
                  # a full prefetch queue (this loop is slower than most brokers) would
                  # otherwise stop fetching for 1 s, measuring the back-off, not the broker
                  "fetch.queue.backoff.ms": 5,
                  "error_cb": lambda e: errors.append(str(e))})
    # Leaders known before assign(): else librdkafka retries its offset query after 500 ms.
    md = c.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None:
        return {"error": f"topic {topic} not in metadata: {md.error if md else 'missing'}"}
    got = 0
    nbytes = 0
    deadline = time.monotonic() + timeout
    t0 = time.perf_counter()
    c.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
    first_error = None
    while got < n and time.monotonic() < deadline:
        for m in c.consume(min(10000, n - got), 0.5):
            if m.error() is not None:
                first_error = first_error or str(m.error())
                continue
            got += 1
            nbytes += len(m.value() or b"")
    t1 = time.perf_counter()
    c.close()
    out = {"records": got, "bytes": nbytes, "seconds": t1 - t0, "client_errors": errors[:5], "error": None}
    if got < n:
        out["error"] = f"timeout: {got} of {n} records after {timeout:.0f} s" + (
            f" (first message error: {first_error})" if first_error else "")
    return out


def latency(bootstrap: str, topic: str, rate: float, seconds: float, acks: str, timeout: float) -> dict:
    from confluent_kafka import Producer
    errors: list[str] = []
    lat: list[float] = []
    failed = [0]
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 0,
                  "queue.buffering.max.messages": 1000000, "error_cb": lambda e: errors.append(str(e))})
    if p.list_topics(topic, timeout=10).topics[topic].error is not None:
        return {"error": f"topic {topic} not in metadata"}
    now = time.perf_counter

    def delivered(sent: float, err, _msg) -> None:
        if err is not None:
            failed[0] += 1
        else:
            lat.append((now() - sent) * 1000)

    total = int(rate * seconds)
    interval = 1.0 / rate
    t0 = now()
    i = 0
    while i < total:
        due = t0 + i * interval
        t = now()
        if t < due:
            p.poll(due - t)
            continue
        while i < total and t0 + i * interval <= t:  # everything due (catch up if behind)
            sent = now()
            try:
                p.produce(topic, VALUE, on_delivery=lambda err, msg, s=sent: delivered(s, err, msg))
            except BufferError:
                p.poll(0.001)
                continue
            i += 1
        p.poll(0)
    t_sent = now()
    left = p.flush(timeout)
    lat.sort()

    def pct(q: float) -> float | None:
        return lat[min(int(q * len(lat)), len(lat) - 1)] if lat else None

    out = {"records": total, "seconds": t_sent - t0, "rate_achieved": total / (t_sent - t0),
           "delivered": len(lat), "failed": failed[0], "p50_ms": pct(0.50), "p99_ms": pct(0.99),
           "p999_ms": pct(0.999), "max_ms": lat[-1] if lat else None, "client_errors": errors[:5], "error": None}
    if left or failed[0]:
        out["error"] = f"{left} undelivered, {failed[0]} failed"
    return out


def main(argv: list[str]) -> int:
    kind = argv[0]
    try:
        if kind == "produce":
            res = produce(argv[1], argv[2], int(argv[3]), argv[4], float(argv[5]) if len(argv) > 5 else 120)
        elif kind == "consume":
            res = consume(argv[1], argv[2], int(argv[3]), int(argv[4]), float(argv[5]) if len(argv) > 5 else 120)
        elif kind == "latency":
            res = latency(argv[1], argv[2], float(argv[3]), float(argv[4]), argv[5],
                          float(argv[6]) if len(argv) > 6 else 30)
        else:
            res = {"error": f"unknown load {kind!r}"}
    except Exception as e:  # noqa: BLE001 - reported, the parent carries on
        res = {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
