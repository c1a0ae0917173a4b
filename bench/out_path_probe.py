"""The broker's out path alone: kcat produces once, then kcat consumes and a minimal Fetch loop
reads the same records again and again; each read's rate beside the broker process's CPU seconds
per GB sent (user + system, from /proc: a figure a shared machine disturbs less than the rate).

    .venv/bin/python bench/out_path_probe.py [--sizes 1024,10240,102400] [--parts 1,8] [--mb 500]
        [--reps 3] [--modes raw,out] [--kafka] [--conf key=value ...]

``out`` is kcat consuming (``-f '%o\\n'``, as bench/kafka_compare.py --matrix), ``raw`` its raw
Fetch loop; ``in`` (with ``--acks``) times kcat producing to a fresh topic instead. ``--kafka``
runs Apache Kafka 4.4.0 beside Samsa. To compare two builds, run it on each (the broker is started
from this checkout). Not a test.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT), str(ROOT / "tests")]

import kafka_compare as kc  # noqa: E402
from broker_process import BrokerProcess  # noqa: E402
from kafka_process import KafkaProcess  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1024,10240,102400", help="record sizes, comma-separated")
    ap.add_argument("--parts", default="1,8", help="partition counts, comma-separated")
    ap.add_argument("--mb", type=int, default=500, help="megabytes per topic")
    ap.add_argument("--reps", type=int, default=3, help="reads per mode (all CPU figures shown, the best rate)")
    ap.add_argument("--modes", default="raw,out", help="raw, out, in; comma-separated")
    ap.add_argument("--acks", default="1", help="acks of the in mode")
    ap.add_argument("--kafka", action="store_true", help="Apache Kafka beside Samsa")
    ap.add_argument("--conf", action="append", default=[], help="a Samsa broker setting, key=value")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="out-path-probe-"))
    brokers = {"samsa": BrokerProcess(work / "samsa", **dict(c.split("=", 1) for c in args.conf)).start()}
    if args.kafka:
        brokers["kafka"] = KafkaProcess(work / "kafka").start()
    print(f"load average {os.getloadavg()}; {os.cpu_count()} CPUs", flush=True)
    try:
        for size in map(int, args.sizes.split(",")):
            n = min(max(args.mb * 1_000_000 // size, 300), 1_000_000)
            data = kc.data_file(work, n, size)
            for parts in map(int, args.parts.split(",")):
                topic = f"t-{size}-{parts}"
                for b in brokers.values():
                    kc.create_topic(b.bootstrap, topic, parts)
                    kc.kcat_produce(b.bootstrap, topic, data, n, "1", 900)
                for mode in args.modes.split(","):
                    for name, b in brokers.items():
                        runs = []
                        for _ in range(args.reps):
                            if mode == "in":
                                fresh = f"{topic}-in-{time.time_ns()}"
                                kc.create_topic(b.bootstrap, fresh, parts)
                                fn = lambda: kc.kcat_produce(b.bootstrap, fresh, data, n, args.acks, 900)  # noqa: E731
                            elif mode == "out":
                                fn = lambda: kc.kcat_consume(b.bootstrap, topic, n, 900)  # noqa: E731
                            else:
                                fn = lambda: kc.raw_fetch(b.bootstrap, topic, parts, n)  # noqa: E731
                            runs.append(kc.with_cpu(b.proc.pid, n * size, fn))
                        best = max(runs, key=lambda r: r["rate"])
                        print(f"{size:>6} B p{parts} {mode:3} {name:5} best {best['rate']:>12,.0f} records/s "
                              f"{best['rate'] * size / 1e6:6,.0f} MB/s; CPU s/GB "
                              + " ".join(f"{r['cpu_s_per_gb']:.2f}" for r in runs)
                              + f"; load {os.getloadavg()[0]:.1f} {best.get('error') or ''}", flush=True)
    finally:
        for b in brokers.values():
            b.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
