"""Start Apache Kafka (one or three KRaft nodes) for a benchmark, as the test fixture does.

    .venv/bin/python bench/kafka_nodes.py --nodes 3 [--data-dir DIR]

prints the bootstrap servers and serves until interrupted; bench scripts import
:func:`kafka_cluster` instead. The one implementation is tests/kafka_process.py.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from kafka_process import KafkaProcess, start_cluster  # noqa: E402


@contextlib.contextmanager
def kafka_cluster(nodes: int = 1, data_dir: Path | None = None, **overrides: object):
    """``nodes`` Kafka nodes in a temporary dir (removed after), stopped by pid on exit."""
    tmp = Path(data_dir) if data_dir else Path(tempfile.mkdtemp(prefix="kafka-bench-"))
    procs: list[KafkaProcess] = start_cluster(tmp, nodes, **overrides)
    try:
        yield procs
    finally:
        for p in procs:
            p.stop()
        if data_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1, choices=(1, 3))
    ap.add_argument("--data-dir", type=Path)
    args = ap.parse_args()
    with kafka_cluster(args.nodes, args.data_dir) as procs:
        print(",".join(p.bootstrap for p in procs), flush=True)
        try:
            signal.sigwait({signal.SIGINT, signal.SIGTERM})
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
