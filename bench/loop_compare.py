"""Samsa on asyncio's default event loop against Samsa on uvloop, alternating, in one run.

    .venv/bin/python bench/loop_compare.py [--rounds 2] [--mb 20]

One broker process per loop (``SAMSA_EVENT_LOOP``), kcat producing then consuming 100 B and
1 KB and 100 KB records to 1 and 8 partitions at acks=1; records/s, the best of ``--rounds``,
and uvloop/asyncio. Not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "tests")]

from broker_process import BrokerProcess  # noqa: E402
from kafka_compare import create_topic, data_file, kcat_consume, kcat_produce  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--mb", type=int, default=20)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loop-compare-"))
    load0 = os.getloadavg()
    best: dict[tuple, float] = {}
    brokers = {}
    for loop in ("asyncio", "uvloop"):
        os.environ["SAMSA_EVENT_LOOP"] = loop
        brokers[loop] = BrokerProcess(work / loop).start()
    try:
        for r in range(args.rounds):
            for size in (100, 1024, 102400):
                n = min(max(args.mb * 1_000_000 // size, 300), 400_000)
                data = data_file(work, n, size)
                for parts in (1, 8):
                    order = ("asyncio", "uvloop") if r % 2 == 0 else ("uvloop", "asyncio")
                    for loop in order:
                        bs = brokers[loop].bootstrap
                        topic = f"l-{size}-p{parts}-r{r}"
                        create_topic(bs, topic, parts)
                        i = kcat_produce(bs, topic, data, n, "1", 600)
                        o = kcat_consume(bs, topic, n, 600)
                        for d, res in (("in", i), ("out", o)):
                            if res["error"]:
                                print(f"error {loop} {size} p{parts} {d}: {res['error']}", flush=True)
                                continue
                            key = (size, parts, d, loop)
                            best[key] = max(best.get(key, 0), res["rate"])
                        print(f"  round {r} {size} B p{parts} {loop}: in {i['rate']:,.0f} out {o['rate']:,.0f}",
                              flush=True)
    finally:
        for b in brokers.values():
            b.stop()
    print(f"\nload average before {load0}, after {os.getloadavg()}; {os.cpu_count()} CPUs; "
          f"best of {args.rounds} rounds\n")
    print("| record | partitions | dir | asyncio (rec/s) | uvloop (rec/s) | uvloop/asyncio |\n|---|---:|---|---:|---:|---:|")
    for (size, parts, d, loop), rate in sorted(best.items()):
        if loop != "asyncio":
            continue
        u = best.get((size, parts, d, "uvloop"), 0)
        print(f"| {size} B | {parts} | {d} | {rate:,.0f} | {u:,.0f} | {u / rate:.2f} |")
    return 0


if __name__ == "__main__":
    time.sleep(0)
    sys.exit(main())
