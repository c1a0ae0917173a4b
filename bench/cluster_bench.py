"""Three brokers on one machine, RF 3: produce throughput with acks=1 and acks=all, latency
p50/p99 at a fixed rate, and fail-over time (leader SIGKILL, and SIGTERM with controlled
shutdown) to the first successful produce on the new leader.

    .venv/bin/python bench/cluster_bench.py [--records 200000] [--rate 2000]
    .venv/bin/python bench/cluster_bench.py --trees .,../baseline --rounds 3   # two commits side by side

Runs a real ZooKeeper (Debian's package) and real broker processes; prints one table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "cluster")]

from confluent_kafka import Producer  # noqa: E402

from cluster_harness import SESSION_TIMEOUT_MS, Cluster  # noqa: E402
from samsa.client.types import NewTopic  # noqa: E402
from waiting import wait_until  # noqa: E402


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
    wait_until(lambda: len(cluster.partition(topic, 0)[2]) == 3, "ISR back", 60)
    return elapsed


def run_once(records: int, rate: int) -> dict[str, float]:
    """One pass of every load on a fresh cluster; figure name -> value."""
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Cluster(Path(tmp)).start()
        try:
            with cluster.admin() as admin:
                admin.create_topics([NewTopic("bench", 3, 3), NewTopic("fail", 1, 3)])
            for t, n in (("bench", 3), ("fail", 1)):
                for i in range(n):
                    wait_until(lambda t=t, i=i: len(cluster.partition(t, i)[2]) == 3, "ISR", 30)
            out["produce acks=1, RF 3 (records/s)"] = throughput(cluster.bootstrap, "bench", "1", records)
            out["produce acks=all, RF 3 (records/s)"] = throughput(cluster.bootstrap, "bench", "all", records)
            p50, p99 = latency(cluster.bootstrap, "bench", rate, 10)
            out[f"acks=all latency at {rate}/s, p50 (ms)"] = p50
            out[f"acks=all latency at {rate}/s, p99 (ms)"] = p99
            out[f"leader SIGKILL -> first produce (s; session timeout {SESSION_TIMEOUT_MS} ms)"] = \
                failover(cluster, "fail", graceful=False)
            out["leader SIGTERM (controlled shutdown) -> first produce (s)"] = failover(cluster, "fail", graceful=True)
        finally:
            cluster.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rate", type=int, default=2000)
    ap.add_argument("--trees", default=str(ROOT),
                    help="comma list of Samsa source trees whose brokers to run (e.g. this one and a git worktree "
                         "of an earlier commit); the rounds alternate between them")
    ap.add_argument("--rounds", type=int, default=1, help="passes per tree; the median is printed")
    args = ap.parse_args()
    trees = [str(Path(t).resolve()) for t in args.trees.split(",") if t]
    runs: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
    for _ in range(args.rounds):
        for tree in trees:
            os.environ["PYTHONPATH"] = tree  # the broker processes import samsa from this tree
            runs[tree].append(run_once(args.records, args.rate))
    names = list(runs[trees[0]][0])
    width = max(len(n) for n in names)
    print(f"{'':<{width}}  " + "  ".join(f"{Path(t).name:>14}" for t in trees))
    for name in names:
        cells = [statistics.median(r[name] for r in runs[t]) for t in trees]
        fmt = ",.0f" if "records/s" in name else (".2f" if "(s" in name else ".1f")
        print(f"{name:<{width}}  " + "  ".join(f"{c:>14{fmt}}" for c in cells))


if __name__ == "__main__":
    main()
