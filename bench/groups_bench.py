"""Group coordinator figures against a fresh ``samsa server start`` process (not a test).

``python bench/groups_bench.py [--runs 3] [--seconds 5]`` prints a table of:

- rebalance time: 8 confluent-kafka consumers subscribe to a 24-partition topic at once (a
  barrier releases their ``subscribe()`` calls together); measured from the moment the last
  ``subscribe()`` returned to the moment every member holds a non-empty assignment and the 24
  partitions are all assigned, once each. With ``group.initial.rebalance.delay.ms`` 0 and 3000
  (a fresh broker for each setting, a fresh group for each run), median of ``--runs`` runs.
  Consumers use librdkafka's defaults (heartbeat.interval.ms 3000, session.timeout.ms 45000):
  a member learns of a rebalance it did not cause from its next heartbeat (one more row with
  heartbeat.interval.ms 500 shows that). Note that, as in Kafka, members arriving during the
  initial delay extend it by another delay (InitialDelayedJoin), so 3000 ms costs about 6 s.
- commit throughput of one group member committing offsets of its partition: synchronous
  ``commit(asynchronous=False)`` back to back for ``--seconds``, and asynchronous commits
  (at most 500 outstanding) for ``--seconds``, counted by their acknowledgement callbacks.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _broker_process_class():
    spec = importlib.util.spec_from_file_location("samsa_tests_root_conftest", ROOT / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.BrokerProcess


BrokerProcess = _broker_process_class()
WAIT = 120.0


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    a = AdminClient({"bootstrap.servers": bootstrap})
    a.create_topics([NewTopic(name, partitions, 1)], operation_timeout=WAIT)[name].result(WAIT)


def warm_up(bootstrap: str) -> None:
    """Create __consumer_offsets before measuring (the first FindCoordinator does)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-warmup"})
    try:
        c.committed([TopicPartition("bench-warmup", 0)], timeout=WAIT)
    except KafkaException:
        pass
    c.close()


def rebalance_once(bootstrap: str, topic: str, group: str, members: int, partitions: int,
                   client_conf: dict) -> float:
    lock = threading.Lock()
    owned: dict[int, set[int]] = {i: set() for i in range(members)}
    subscribed_at: list[float] = []
    done_at: list[float] = []
    done = threading.Event()
    stop = threading.Event()
    barrier = threading.Barrier(members)

    def check() -> None:
        if all(owned.values()):
            parts = [p for ps in owned.values() for p in ps]
            if len(parts) == partitions and len(set(parts)) == partitions and not done.is_set():
                done_at.append(time.perf_counter())
                done.set()

    def member(i: int) -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": f"bench-{i}",
                      "enable.auto.commit": False, "log_level": 0, **client_conf})

        def on_assign(_c, tps):
            with lock:
                owned[i] = {tp.partition for tp in tps}
                check()

        def on_revoke(_c, tps):
            with lock:
                owned[i] = set()

        barrier.wait()
        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        with lock:
            subscribed_at.append(time.perf_counter())
        while not stop.is_set():
            c.poll(0.01)
        c.close()

    threads = [threading.Thread(target=member, args=(i,), daemon=True) for i in range(members)]
    for t in threads:
        t.start()
    if not done.wait(WAIT):
        stop.set()
        raise RuntimeError(f"group {group} did not settle within {WAIT}s: {owned}")
    stop.set()
    for t in threads:
        t.join(WAIT)
    return done_at[0] - max(subscribed_at)


def rebalance_times(delay_ms: int, runs: int, client_conf: dict, members: int = 8, partitions: int = 24) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="samsa-groups-bench-") as d:
        b = BrokerProcess(Path(d), **{"group.initial.rebalance.delay.ms": delay_ms}).start()
        try:
            warm_up(b.bootstrap)
            topic = "bench-rebalance"
            create_topic(b.bootstrap, topic, partitions)
            return [rebalance_once(b.bootstrap, topic, f"bench-rebalance-{delay_ms}-{r}", members, partitions,
                                   client_conf) for r in range(runs)]
        finally:
            b.stop()


def commit_rates(seconds: float) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="samsa-groups-bench-") as d:
        b = BrokerProcess(Path(d)).start()
        try:
            warm_up(b.bootstrap)
            topic = "bench-commit"
            create_topic(b.bootstrap, topic, 1)
            acked = [0]
            errors = [0]

            def on_commit(err, _parts):
                if err is None:
                    acked[0] += 1
                else:
                    errors[0] += 1

            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "bench-commit", "enable.auto.commit": False,
                          "on_commit": on_commit, "log_level": 0})
            c.subscribe([topic])
            deadline = time.monotonic() + WAIT
            while not c.assignment() and time.monotonic() < deadline:
                c.poll(0.05)
            if not c.assignment():
                raise RuntimeError("no assignment")

            # synchronous: one commit at a time
            n = 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                n += 1
                c.commit(offsets=[TopicPartition(topic, 0, n)], asynchronous=False)
            sync_rate = n / (time.perf_counter() - start)

            # asynchronous: keep up to 500 outstanding, count acknowledgements
            c.poll(0)
            acked[0] = errors[0] = 0
            sent = 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                if sent - acked[0] - errors[0] < 500:
                    sent += 1
                    c.commit(offsets=[TopicPartition(topic, 0, n + sent)], asynchronous=True)
                    c.poll(0)
                else:
                    c.poll(0.001)
            drain = time.monotonic() + WAIT
            while acked[0] + errors[0] < sent and time.monotonic() < drain:
                c.poll(0.01)
            async_rate = acked[0] / (time.perf_counter() - start)
            if errors[0]:
                print(f"warning: {errors[0]} async commits failed", file=sys.stderr)
            c.close()
            return sync_rate, async_rate
        finally:
            b.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5.0)
    args = ap.parse_args()

    rows = []
    for delay, conf, label in ((0, {}, ""), (3000, {}, ""),
                               (0, {"heartbeat.interval.ms": 500}, ", heartbeat.interval.ms 500")):
        times = rebalance_times(delay, args.runs, conf)
        rows.append((f"rebalance, 8 consumers / 24 partitions, initial delay {delay} ms{label}",
                     f"{statistics.median(times):.2f} s median",
                     "runs: " + ", ".join(f"{t:.2f}" for t in times)))
    sync_rate, async_rate = commit_rates(args.seconds)
    rows.append(("OffsetCommit, 1 consumer, synchronous", f"{sync_rate:,.0f} commits/s", f"{args.seconds:g} s"))
    rows.append(("OffsetCommit, 1 consumer, asynchronous", f"{async_rate:,.0f} commits/s",
                 f"{args.seconds:g} s, <=500 in flight"))

    import confluent_kafka
    print(f"Samsa group coordinator, {os.cpu_count()} CPUs, confluent-kafka {confluent_kafka.__version__} "
          f"(librdkafka {confluent_kafka.libversion()[0]})")
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in rows)
    print(f"| {'measurement'.ljust(w0)} | {'result'.ljust(w1)} | notes")
    print(f"|{'-' * (w0 + 2)}|{'-' * (w1 + 2)}|------")
    for name, value, note in rows:
        print(f"| {name.ljust(w0)} | {value.ljust(w1)} | {note}")


if __name__ == "__main__":
    main()
