"""A long network-fault campaign on a three-broker cluster whose ZooKeeper and brokers each
live in a network namespace (``tests/cluster/nemesis.py``): random isolations (ZooKeeper's
too), cuts from ZooKeeper, cut links, one-way drops, 100 ms delay with 5 % loss on every link,
SIGKILLs and pauses past the session, one at a time, under an acks=all idempotent producer, an
acks=1 producer and a transactional one; then the checker's figures (``tests/cluster/checker.py``).

    sudo .venv/bin/python bench/nemesis_bench.py [--faults 100] [--seed 1] [--slow-s 60]

Needs root, iproute2 and iptables. The bounded scenarios run in ./test (tests/cluster/test_partitions.py).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "cluster")]

from scenarios import run_campaign  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--slow-s", type=float, default=60, help="how long every tenth delay-and-loss fault lasts")
    parser.add_argument("--keep", type=Path, help="run in this directory and keep the logs")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a SIGTERM still tears the namespaces down
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # the monitor's own ZooKeeper client, cut off at times
    t0 = time.monotonic()
    if args.keep:
        counts, report = run_campaign(args.keep, args.faults, args.seed, args.slow_s, log=lambda s: print(s, flush=True))
    else:
        with tempfile.TemporaryDirectory(prefix="samsa-nemesis-") as root:
            counts, report = run_campaign(Path(root), args.faults, args.seed, args.slow_s,
                                          log=lambda s: print(s, flush=True))
    print(f"nemesis campaign: {sum(v for k, v in counts.items() if k != 'not recovered')} faults "
          f"({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))}), seed {args.seed}, "
          f"{time.monotonic() - t0:.0f} s")
    for line in report.lines():
        print("  " + line)
    print(f"  safety violations: {report.violations() or 'none'}")
    print(f"  broker log problems: {len(report.broker_log_problems)}")
    for line in report.broker_log_problems[:10]:
        print("  problem: " + line)


if __name__ == "__main__":
    main()
