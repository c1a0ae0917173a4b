"""One Samsa node against a KRaft cluster of several on this machine, the same load (issue 34, item 5).

    .venv/bin/python bench/kraft_nodes_compare.py [--records 300000] [--size 1024] [--nodes 1 2]

Each configuration is started as a user starts it, in its own processes: ``samsa server start
config/server.properties`` for one node, ``samsa server start --local-nodes N`` for N; then kcat
(its own process) produces the records to a topic of 8 partitions (acks=1, replication factor 1:
the nodes share the partitions; and, with N > 1, acks=all with replication factor 2) and consumes
them back. Prints records/s and MB/s per load and the CPU seconds each configuration's server
processes used; the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(__file__).resolve().parent
sys.path[:0] = [str(BENCH)]

from kafka_compare import create_topic, data_file, kcat_consume, kcat_produce  # noqa: E402

PY = sys.executable


def _free_run(n: int) -> int:
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise RuntimeError("no run of free ports")


def _cpu_seconds(pid: int) -> float:
    """User+system CPU of a process and its children (the nodes of --local-nodes)."""
    total = 0.0
    pids = [pid]
    while pids:
        p = pids.pop()
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            pids += [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except (OSError, IndexError, ValueError):
            pass
    return total


def _ready(port: int, n: int) -> bool:
    try:
        from confluent_kafka.admin import AdminClient
        md = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0}).list_topics(timeout=3)
        return len(md.brokers) == n
    except Exception:
        return False


def run_config(nodes: int, records: int, size: int, work: Path) -> dict:
    data_dir = work / f"data-{nodes}"
    port = _free_run(2 * nodes)
    args = [PY, "-m", "samsa.cli.main", "server", "start", str(ROOT / "config" / "server.properties"),
            "--override", f"log.dirs={data_dir}", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}"]
    if nodes > 1:
        args[5:5] = ["--local-nodes", str(nodes)]
    log = open(work / f"server-{nodes}.log", "ab")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    out: dict = {"nodes": nodes, "loads": {}}
    try:
        deadline = time.monotonic() + 120
        while not _ready(port, nodes):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{nodes} node(s) not ready; see {work}/server-{nodes}.log")
            time.sleep(0.2)
        boot = ",".join(f"127.0.0.1:{port + 2 * i}" for i in range(nodes))
        data = data_file(work, records, size)
        loads = [("rf1-acks1", 1, "1")] + ([("rf2-acksall", 2, "all")] if nodes > 1 else [])
        for name, rf, acks in loads:
            topic = f"bench-{name}"
            create_topic(boot, topic, 8, rf)
            cpu0 = _cpu_seconds(proc.pid)
            p = kcat_produce(boot, topic, data, records, acks, 600)
            cpu1 = _cpu_seconds(proc.pid)
            c = kcat_consume(boot, topic, records, 600)
            cpu2 = _cpu_seconds(proc.pid)
            out["loads"][name] = {
                "in_rate": p["rate"], "in_MBps": p["rate"] * size / 1e6, "in_error": p["error"],
                "in_cpu_s": cpu1 - cpu0, "out_rate": c["rate"], "out_MBps": c["rate"] * size / 1e6,
                "out_error": c["error"], "out_cpu_s": cpu2 - cpu1}
            print(f"  {nodes} node(s) {name}: in {p['rate']:,.0f} rec/s ({p['rate'] * size / 1e6:,.0f} MB/s, "
                  f"server CPU {cpu1 - cpu0:.1f} s), out {c['rate']:,.0f} rec/s ({c['rate'] * size / 1e6:,.0f} MB/s, "
                  f"server CPU {cpu2 - cpu1:.1f} s) {p['error'] or ''}{c['error'] or ''}", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=300000)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="samsa-kraft-nodes-"))
    before = os.getloadavg()
    try:
        results = [run_config(n, args.records, args.size, work) for n in args.nodes]
    finally:
        if not os.environ.get("KEEP"):
            shutil.rmtree(work, ignore_errors=True)
    after = os.getloadavg()
    print(f"\nload average before {before[0]:.2f} {before[1]:.2f} {before[2]:.2f}, after {after[0]:.2f} "
          f"{after[1]:.2f} {after[2]:.2f}; {os.cpu_count()} CPUs; {args.records:,} records of {args.size} B, 8 partitions\n")
    print("| nodes | load | in rec/s | in MB/s | out rec/s | out MB/s | server CPU s (in / out) |")
    print("|---:|---|---:|---:|---:|---:|---|")
    for r in results:
        for name, x in r["loads"].items():
            print(f"| {r['nodes']} | {name} | {x['in_rate']:,.0f} | {x['in_MBps']:,.0f} | {x['out_rate']:,.0f} | "
                  f"{x['out_MBps']:,.0f} | {x['in_cpu_s']:.1f} / {x['out_cpu_s']:.1f} |")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
