"""Samsa's clients beside kafka-python, aiokafka and confluent-kafka, driven by Samsa's
``producer-perf-test`` and ``consumer-perf-test`` against one broker process, same run.

    .venv/bin/python bench/clients_compare.py [--records 300000]

100-byte records, acks=1, linger.ms=5 (the perf tools' usual settings); then the producer
latency at a fixed 10,000 records/s. Prints one table; ratios are against kafka-python.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
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
               "--client", client, "--group", f"perf-{client}", "--timeout", "30000")
    return float(out.strip().splitlines()[-1].split(", ")[5])  # nMsg.sec


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--records", type=int, default=300_000)
    args = ap.parse_args()
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp), **{"num.partitions": 1}).start()
        try:
            produced = {c: produce(broker.bootstrap, c, f"p-{c}", n) for c in CLIENTS}
            produce(broker.bootstrap, "confluent", "c-source", n)
            consumed = {c: consume(broker.bootstrap, c, "c-source", n) for c in CLIENTS}
            latency = {c: produce(broker.bootstrap, c, f"l-{c}", 50_000, 10_000)[1] for c in CLIENTS}
        finally:
            broker.stop()
    base_p, base_c = produced["kafka-python"][0], consumed["kafka-python"]
    print(f"{'client':<14} {'produce rec/s':>14} {'vs kafka-python':>16} {'consume rec/s':>14} {'vs kafka-python':>16}"
          f" {'p99 @10k/s (ms)':>16}")
    for c in CLIENTS:
        print(f"{c:<14} {produced[c][0]:>14,.0f} {produced[c][0] / base_p:>15.2f}x {consumed[c]:>14,.0f} "
              f"{consumed[c] / base_c:>15.2f}x {latency[c]:>16}")


if __name__ == "__main__":
    main()
