"""Three brokers on one machine, RF 3: produce throughput with acks=1 and acks=all, latency
p50/p99 at a fixed rate, and fail-over time (leader SIGKILL, and SIGTERM with controlled
shutdown) to the first successful produce on the new leader.

    .venv/bin/python bench/cluster_bench.py [--records 200000] [--rate 2000]

Runs a real ZooKeeper (Debian's package) and real broker processes; prints one table.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "cluster")]

from confluent_kafka import Producer  # noqa: E402

from cluster_harness import SESSION_TIMEOUT_MS, Cluster  # noqa: E402
from samsa.client.types import NewTopic  # noqa: E402


def throughput(bootstrap: str, topic: str, acks: str, n: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.num.messages": 10000,
                  "queue.buffering.max.messages": 1000000})
    payload = b"x" * 100
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, payload)
                break
            except BufferError:
                p.poll(0.01)
    p.flush(120)
    return n / (time.perf_counter() - t0)


def latency(bootstrap: str, topic: str, rate: int, seconds: float) -> tuple[float, float]:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0})
    lat: list[float] = []
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        due = start + i / rate
        p.poll(0)
        if due > time.perf_counter():
            time.sleep(due - time.perf_counter())  # pace without burning a core the brokers need
        sent = time.perf_counter()
        p.produce(topic, b"x" * 100, on_delivery=lambda e, m, s=sent: lat.append(time.perf_counter() - s))
    p.flush(30)
    lat.sort()
    return lat[len(lat) // 2] * 1000, lat[int(len(lat) * 0.99)] * 1000


def failover(cluster: Cluster, topic: str, graceful: bool) -> float:
    """Seconds from stopping partition 0's leader to the first acknowledged produce after it."""
    leader = cluster.partition(topic, 0)[0]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 0,
                  "socket.timeout.ms": 2000, "retry.backoff.ms": 20, "retry.backoff.max.ms": 100,
                  "topic.metadata.refresh.interval.ms": 200})
    p.produce(topic, b"warm", partition=0)
    p.flush(10)
    t0 = time.perf_counter()
    (cluster.brokers[leader].stop if graceful else cluster.brokers[leader].kill)()
    done: list[float] = []
    p.produce(topic, b"after", partition=0, on_delivery=lambda e, m: done.append(time.perf_counter()) if not e else None)
    p.flush(60)
    elapsed = done[0] - t0 if done else float("nan")
    cluster.brokers[leader].start()
    cluster.wait_for(lambda: len(cluster.partition(topic, 0)[2]) == 3, "ISR back", 60)
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=2000)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp)).start()
        try:
            with cluster.admin() as admin:
                admin.create_topics([NewTopic("bench", 3, 3), NewTopic("fail", 1, 3)])
            for t, n in (("bench", 3), ("fail", 1)):
                for i in range(n):
                    cluster.wait_for(lambda t=t, i=i: len(cluster.partition(t, i)[2]) == 3, "ISR", 30)
            rows = [
                ("produce acks=1, RF 3 (records/s)", f"{throughput(cluster.bootstrap, 'bench', '1', args.records):,.0f}"),
                ("produce acks=all, RF 3 (records/s)", f"{throughput(cluster.bootstrap, 'bench', 'all', args.records):,.0f}"),
            ]
            p50, p99 = latency(cluster.bootstrap, "bench", args.rate, 10)
            rows.append((f"acks=all latency at {args.rate}/s, p50 / p99 (ms)", f"{p50:.1f} / {p99:.1f}"))
            rows.append((f"leader SIGKILL -> first produce (s; session timeout {SESSION_TIMEOUT_MS} ms)",
                         f"{failover(cluster, 'fail', graceful=False):.2f}"))
            rows.append(("leader SIGTERM (controlled shutdown) -> first produce (s)",
                         f"{failover(cluster, 'fail', graceful=True):.2f}"))
        finally:
            cluster.stop()
    width = max(len(r[0]) for r in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
