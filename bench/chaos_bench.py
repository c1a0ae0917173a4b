"""Chaos under load on a three-broker ZooKeeper cluster: random SIGKILL/restarts (the
controller's among them) and SIGSTOP pauses past the session, under an acks=all idempotent
confluent-kafka producer; prints what was acknowledged, lost, duplicated, the longest stall,
the longest leaderless time and the fail-over times.

    .venv/bin/python bench/chaos_bench.py [--faults 40] [--seed 1] [--session-ms 3000]

The harness is ``tests/cluster/chaos.py`` (its bounded round runs in ./test).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "cluster")]

from chaos import run_chaos  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--faults", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--session-ms", type=int, default=3000)
    parser.add_argument("--keep", type=Path, help="run in this directory and keep the brokers' logs")
    args = parser.parse_args()
    t0 = time.monotonic()
    if args.keep:
        report = run_chaos(args.keep, args.faults, args.seed, args.session_ms)
    else:
        with tempfile.TemporaryDirectory(prefix="samsa-chaos-") as root:
            report = run_chaos(Path(root), args.faults, args.seed, args.session_ms)
    print(f"chaos: {args.faults} faults, seed {args.seed}, zookeeper.session.timeout.ms={args.session_ms}, "
          f"{time.monotonic() - t0:.0f} s")
    for line in report.lines():
        print("  " + line)
    for line in report.broker_log_problems[:10]:
        print("  problem: " + line)


if __name__ == "__main__":
    main()
