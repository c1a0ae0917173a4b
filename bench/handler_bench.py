"""The broker's own cost per request, without sockets or clients: Produce and Fetch frames
handed straight to the dispatcher of an in-process broker, timed.

    .venv/bin/python bench/handler_bench.py                      # this tree
    .venv/bin/python bench/handler_bench.py --trees .,../baseline  # two source trees, alternating
    .venv/bin/python bench/handler_bench.py --metrics off,on       # this tree, Prometheus metrics off and on

Each tree runs in its own process (``PYTHONPATH`` set to it), several rounds alternating, and
the best round of each is printed: the figure the machine's noise disturbs least.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def measure(requests: int, records: int, metrics: bool = False) -> dict[str, float]:
    """Microseconds per Produce (acks=1, one batch) and per Fetch (of that batch), in this process."""
    from samsa.broker_config import BrokerConfig
    from samsa.protocol import api
    from samsa.protocol.records import Record, build_batch
    try:
        from samsa.server.broker import BrokerServer as Server
    except ImportError:  # a tree from before the rename
        from samsa.server.broker import Broker as Server

    class Conn:  # what a handler may ask of its connection
        peer, closed, task = "bench:0", False, None
        auth = None  # a PLAINTEXT connection: no SASL gate
        listener = "PLAINTEXT"
        arrived_at = 0.0  # (metrics on: the frame's arrival; 0 = when its handling starts)

        def close(self, why: str = "") -> None:
            raise RuntimeError(why)

    async def run(tmp: str) -> dict[str, float]:
        settings = {"log.dirs": tmp, "listeners": "PLAINTEXT://127.0.0.1:0", "offsets.topic.replication.factor": 1}
        if metrics:
            settings["prometheus.listener"] = "http://127.0.0.1:0"
        server = Server(BrokerConfig(settings, warn_unknown=False))
        await server.start()
        try:
            create = getattr(server, "admin", server).create_topic
            create("bench", 1, 1)
            batch = bytes(build_batch([Record(i, 1_700_000_000_000, None, b"v" * 100, []) for i in range(records)]))
            produce = b"".join(api.encode_request(0, 9, 1, "bench", {
                "acks": 1, "timeout_ms": 1000,
                "topic_data": [{"name": "bench", "partition_data": [{"index": 0, "records": batch}]}]}))[4:]
            conn = Conn()
            t0 = time.perf_counter()
            for _ in range(requests):
                server.dispatcher.dispatch(conn, bytearray(produce))
            produce_us = (time.perf_counter() - t0) / requests * 1e6
            fetch = b"".join(api.encode_request(1, 12, 2, "bench", {
                "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
                "topics": [{"topic": "bench", "partitions": [{"partition": 0, "fetch_offset": 0,
                                                              "partition_max_bytes": len(batch)}]}]}))[4:]
            t0 = time.perf_counter()
            for _ in range(requests):
                server.dispatcher.dispatch(conn, bytearray(fetch))
            fetch_us = (time.perf_counter() - t0) / requests * 1e6
            return {"produce_us": produce_us, "fetch_us": fetch_us}
        finally:
            await server.stop()

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(run(tmp))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default=str(ROOT), help="comma list of Samsa source trees")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--records", type=int, default=100, help="records of 100 B per produce batch")
    ap.add_argument("--metrics", default="off", help="off, on, or off,on: the broker's Prometheus metrics")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(measure(args.requests, args.records, args.metrics == "on")))
        return 0
    trees = [str(Path(t).resolve()) for t in args.trees.split(",") if t]
    modes = [m for m in args.metrics.split(",") if m]
    best: dict[tuple[str, str], dict[str, float]] = {}
    for _ in range(args.rounds):
        for tree in trees:
            for mode in modes:
                out = subprocess.run([sys.executable, __file__, "--child", "--requests", str(args.requests),
                                      "--records", str(args.records), "--metrics", mode],
                                     env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True,
                                     check=True, cwd=tree)
                got = json.loads(out.stdout.strip().splitlines()[-1])
                mine = best.setdefault((tree, mode), got)
                for k, v in got.items():
                    mine[k] = min(mine[k], v)
    print(f"best of {args.rounds} rounds, {args.requests} requests each, {args.records} records per batch:")
    print(f"{'tree':<24} {'metrics':>7} {'produce (us)':>13} {'fetch (us)':>11} {'produce rec/s':>14} "
          f"{'fetch rec/s':>12}")
    for (tree, mode), figures in best.items():
        print(f"{Path(tree).name:<24} {mode:>7} {figures['produce_us']:>13.1f} {figures['fetch_us']:>11.1f} "
              f"{args.records / figures['produce_us'] * 1e6:>14,.0f} {args.records / figures['fetch_us'] * 1e6:>12,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
