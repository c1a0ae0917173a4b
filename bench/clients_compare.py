"""Samsa's clients beside kafka-python, aiokafka and confluent-kafka, driven by Samsa's
``producer-perf-test`` and ``consumer-perf-test`` against one broker process, same run.

    .venv/bin/python bench/clients_compare.py [--records 300000] [--rounds 3]

100-byte records, acks=1, linger.ms=5 (the perf tools' usual settings); then the producer
latency at a fixed 10,000 records/s. Each round runs every client once (in turn, so that a
busy moment of a shared machine does not fall on one client only); the table shows each
client's median over the rounds, and ratios against kafka-python's. A throwaway group
join first creates ``__consumer_offsets``, so that no client pays for it.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from broker_process import BrokerProcess  # noqa: E402

CLIENTS = ("samsa", "kafka-python", "aiokafka", "confluent")
FINAL = re.compile(r"^(\d+) records sent, ([\d.]+) records/sec .*?, ([\d.]+) ms avg latency, ([\d.]+) ms max latency, "
                   r"(\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th")


def tool(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "samsa.cli.main", *args], capture_output=True, text=True, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {r.stderr.strip()[-500:]}")
    return r.stdout


def produce(bootstrap: str, client: str, topic: str, n: int, throughput: int = -1) -> tuple[float, int]:
    out = tool("producer-perf-test", "--topic", topic, "--num-records", str(n), "--record-size", "100",
               "--throughput", str(throughput), "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1",
               "linger.ms=5", "--client", client)
    m = FINAL.match(out.strip().splitlines()[-1])
    assert m, out
    return float(m.group(2)), int(m.group(7))


def consume(bootstrap: str, client: str, topic: str, n: int) -> float:
    out = tool("consumer-perf-test", "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(n),
               "--client", client, "--group", f"perf-{client}-{time.monotonic_ns()}", "--timeout", "30000")
    return float(out.strip().splitlines()[-1].split(", ")[5])  # nMsg.sec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    n = args.records
    produced: dict[str, list[float]] = {c: [] for c in CLIENTS}
    consumed: dict[str, list[float]] = {c: [] for c in CLIENTS}
    latency: dict[str, list[int]] = {c: [] for c in CLIENTS}
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), **{"num.partitions": 1}).start()
        try:
            produce(broker.bootstrap, "confluent", "c-source", n)
            consume(broker.bootstrap, "confluent", "c-source", 1000)  # creates __consumer_offsets
            for r in range(args.rounds):
                for c in CLIENTS:
                    produced[c].append(produce(broker.bootstrap, c, f"p-{c}-{r}", n)[0])
                    consumed[c].append(consume(broker.bootstrap, c, "c-source", n))
                    latency[c].append(produce(broker.bootstrap, c, f"l-{c}-{r}", 50_000, 10_000)[1])
        finally:
            broker.stop()
    p = {c: statistics.median(v) for c, v in produced.items()}
    q = {c: statistics.median(v) for c, v in consumed.items()}
    lat = {c: statistics.median(v) for c, v in latency.items()}
    print(f"{'client':<14} {'produce rec/s':>14} {'vs kafka-python':>16} {'consume rec/s':>14} {'vs kafka-python':>16}"
          f" {'p99 @10k/s (ms)':>16}")
    for c in CLIENTS:
        print(f"{c:<14} {p[c]:>14,.0f} {p[c] / p['kafka-python']:>15.2f}x {q[c]:>14,.0f} "
              f"{q[c] / q['kafka-python']:>15.2f}x {lat[c]:>16}")
    print("per round:", {c: [round(x) for x in produced[c]] for c in CLIENTS},
          {c: [round(x) for x in consumed[c]] for c in CLIENTS}, latency)


if __name__ == "__main__":
    main()
