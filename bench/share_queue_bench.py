"""Records/s through a share group (KIP-932) of 1, 2 and 4 consumers used as a work queue, beside
a classic consumer group of the same sizes, on Apache Kafka 4.4.0 and on Samsa in one run.

    .venv/bin/python bench/share_queue_bench.py [--records 50000] [--partitions 8] [--sizes 1,2,4]

One Kafka KRaft node (tests/kafka_process.py, through bench/kafka_nodes.py) and one Samsa broker
(as the tests start it) run side by side; each gets topics of ``--partitions`` partitions. Every run
is a new group: a share group (confluent-kafka ``ShareConsumer``, implicit
acknowledgement, the group's ``share.auto.offset.reset=earliest``) or a classic group
(``Consumer``, ``auto.offset.reset=earliest``, auto commit), with each consumer in a process of
its own, on a topic of its own. Once every member of the group has partitions, ``--records``
records of 100 B are produced (kcat, acks=1) and a run's rate is the records over the time from
the produce's start until the group has read them all: a work queue's throughput, end to end
(joins and assignment are not counted; the produce's own rate is printed beside).
The brokers alternate run by run so that the machine's changing load falls on both; each
cell is the median of ``--rounds`` runs. Prints a Markdown table and the load average. Not a test.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "share"), str(ROOT / "bench")]

from share_common import set_share_group_config, stop_processes  # noqa: E402
from share_helpers import SHARE_BROKER_CONFIG  # noqa: E402  (what both brokers accept: the tests' bounds)


def worker(kind: str, bootstrap: str, group: str, topic: str, index: int, assigned, total, done) -> None:
    """One consumer: counts what it reads into ``total``; a classic consumer notes how many
    partitions it has in ``assigned[index]``."""
    from share_common import confluent_reader
    c, read_once = confluent_reader(kind, bootstrap, group, topic, batch=500)

    def read():
        got = read_once()
        if kind == "classic":
            assigned[index] = len(c.assignment())
        return got
    while not done.is_set():
        got = read()
        if got:
            with total.get_lock():
                total.value += len(got)
    if kind == "share":
        c.commit_sync(10)  # the last poll's records (implicit acknowledgement)
    c.close()


def share_members_assigned(bootstrap: str, group: str) -> int:
    """How many of the share group's members have partitions (ShareGroupDescribe v1 to a one-node cluster)."""
    from share_helpers import share_members
    return len([m for m in share_members(bootstrap, group) if m["assignment"]["topic_partitions"]])


def run(kind: str, consumers: int, bootstrap: str, topic: str, partitions: int, data: Path, records: int,
        timeout: float) -> dict:
    """A new group of ``consumers`` on the empty ``topic``; once every member has partitions,
    ``records`` are produced (kcat, acks=1) and the time runs from the produce's start until
    the group has read them all."""
    from kafka_compare import create_topic, kcat_produce
    create_topic(bootstrap, topic, partitions)
    group = f"bench-{kind}-{consumers}-{uuid.uuid4().hex[:6]}"
    if kind == "share":
        set_share_group_config(bootstrap, group)
    ctx = mp.get_context("spawn")
    assigned, total, done = ctx.Array("i", consumers), ctx.Value("q", 0), ctx.Event()
    procs = [ctx.Process(target=worker, args=(kind, bootstrap, group, topic, i, assigned, total, done), daemon=True)
             for i in range(consumers)]
    for p in procs:
        p.start()
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # the group formed: every member with partitions
            if kind == "share" and share_members_assigned(bootstrap, group) >= consumers:
                break
            if kind == "classic" and all(assigned) and sum(assigned) == partitions:
                break
            time.sleep(0.1)
        else:
            return {"records": 0, "seconds": 0, "rate": 0, "error": "the group did not form within 120 s"}
        t0 = time.time()
        produced = kcat_produce(bootstrap, topic, data, records, "1", timeout)
        if produced["error"]:
            return {"records": 0, "seconds": 0, "rate": 0, "error": produced["error"]}
        deadline = t0 + timeout
        while total.value < records and time.time() < deadline:
            time.sleep(0.01)
        secs, read = time.time() - t0, total.value
    finally:
        stop_processes(procs, done)
    return {"records": read, "seconds": secs, "rate": read / secs,
            "produce_rate": produced["rate"],
            "error": None if read >= records else f"only {read} of {records} within {timeout:.0f} s"}


def median(runs: list[dict]) -> dict:
    """The run of median rate (a failed run, if any, is the answer: its error is shown)."""
    failed = [r for r in runs if r["error"]]
    return failed[0] if failed else sorted(runs, key=lambda r: r["rate"])[len(runs) // 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=30_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--sizes", default="1,2,4", help="comma list of group sizes")
    ap.add_argument("--timeout", type=float, default=180, help="seconds per run")
    ap.add_argument("--rounds", type=int, default=3, help="runs per group kind, size and broker (the median is shown)")
    args = ap.parse_args()
    from broker_process import BrokerProcess
    from kafka_compare import create_topic, data_file, kcat_produce
    from kafka_nodes import kafka_cluster

    work = Path(tempfile.mkdtemp(prefix="share-bench-"))
    load0, started = os.getloadavg(), time.time()
    rows: list[tuple[str, int, dict]] = []
    with kafka_cluster(1, work / "kafka", **SHARE_BROKER_CONFIG) as kafkas:
        samsa = BrokerProcess(work / "samsa", **SHARE_BROKER_CONFIG).start()
        try:
            brokers = {"kafka": kafkas[0].bootstrap, "samsa": samsa.bootstrap}
            data = data_file(work, args.records, 100)
            for bs in brokers.values():  # warm-up, not measured: Kafka's JIT, Samsa's first segments
                create_topic(bs, "warm-up", args.partitions)
                kcat_produce(bs, "warm-up", data, args.records, "1", 600)
            flip, n = False, 0
            for size in [int(s) for s in args.sizes.split(",")]:
                for kind in ("share", "classic"):
                    row: dict[str, list[dict]] = {"kafka": [], "samsa": []}
                    for _ in range(args.rounds):
                        for side in (("samsa", "kafka") if flip else ("kafka", "samsa")):
                            res = run(kind, size, brokers[side], f"jobs-{n}", args.partitions, data,
                                      args.records, args.timeout)
                            row[side].append(res)
                            print(f"  {kind:<7} x{size} {side:<5} {res}", flush=True)
                            n += 1
                        flip = not flip
                    rows.append((kind, size, {side: median(runs) for side, runs in row.items()}))
        finally:
            samsa.stop()
    runs = len(rows) * 2 * args.rounds
    print(f"\n{args.records:,} records of 100 B in {args.partitions} partitions; {runs} runs "
          f"(median of {args.rounds} each) in "
          f"{time.time() - started:.0f} s; load average before {tuple(round(x, 1) for x in load0)}, after "
          f"{tuple(round(x, 1) for x in os.getloadavg())}; {os.cpu_count()} CPUs\n")
    print("| group | consumers | Kafka 4.4.0 (records/s) | Samsa (records/s) | Samsa/Kafka "
          "| kcat's produce in the run, Kafka / Samsa (records/s) |\n|---|---:|---:|---:|---:|---:|")
    for kind, size, row in rows:
        k, s = row["kafka"], row["samsa"]
        err = k["error"] or s["error"]
        ratio = f"{s['rate'] / k['rate']:.2f}" if k["rate"] and s["rate"] and not err else f"error: {err}"
        print(f"| {kind} | {size} | {k['rate']:,.0f} | {s['rate']:,.0f} | {ratio} "
              f"| {k.get('produce_rate', 0):,.0f} / {s.get('produce_rate', 0):,.0f} |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
