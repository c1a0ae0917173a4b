"""Both pipelines on a Spark standalone cluster (a master and two workers from PySpark's own
launcher) against a three-broker Samsa cluster on ZooKeeper: one Spark worker and one broker are
SIGKILLed while they run, and nothing is lost, nothing written twice where exactly-once is promised.

The drivers are ``samsa pipeline run … --master spark://…`` processes; their executors run this
interpreter (samsa installed in it: the "environment on every node" way). Both read with Spark's
own Kafka connector, whose jar reaches the executors through ``spark.jars.packages``; the samsa
sink writes the decisions and counts in transactions from the executors. (The samsa source's
streaming reader is a Python process the driver starts per query, which Spark gives a fixed 10 s
to connect back: on this shared machine's loads, 20-30 on two cores, it missed them; GAPS.md.)

About 2.5 minutes alone, most of it JVMs starting (a master, two workers, two drivers, four
executors). Spark's Kafka source asks for the latest offsets with Kafka's Java admin client,
which waits ``request.timeout.ms`` (30 s) on a request to the dead broker and gives the call
``default.api.timeout.ms`` (60 s) before Spark makes a new one that finds the new leader: with
the defaults the first micro-batch after the broker's SIGKILL started a minute late, so the
drivers run with 5 s and 10 s (``FAILOVER``), as a user who wants a quick failover would.

What it found (2026-11-26), each fixed: a window twice in ``activity-counts`` (ExactlyOnceWriter's
task run again after its executor was lost wrote its rows again: it writes in transactions now);
14 counts lost (the producer committed while a batch waited out its retry backoff after the
leader's SIGKILL; the batch was written later at the next epoch and aborted:
tests/unit/test_accumulator_backoff.py); a velocity reject decided approve (a card of a partition
trailing the other lost its times from the rules' state: test_payments_pipeline.py).
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from samsa.client.types import TopicPartition
from samsa.pipelines import activity, payments
from samsa.pipelines.common import PipelineConfig, ensure_topics
from samsa.pipelines.feed import send
from samsa.spark.standalone import SparkStandalone
from spark_helpers import activity_windows, ms, read_committed, read_topic
from test_payments_pipeline import check_one_decision_each
from waiting import wait_until

sys.path.insert(0, str(Path(__file__).parents[1] / "cluster"))
from cluster_harness import Cluster  # noqa: E402

# The transaction coordinators' log replicated too, so the exactly-once sink outlives a broker.
TXN = {"transaction.state.log.replication.factor": 3, "transaction.state.log.min.isr": 2,
       "transaction.state.log.num.partitions": 4, "min.insync.replicas": 2}
START = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SMALL = ["--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=512m", "--conf",
         "spark.executor.cores=1", "--conf", "spark.cores.max=2", "--conf", "spark.sql.shuffle.partitions=2"]
# Spark's Kafka source and sink clients (and the samsa sink's): quick to give up on a dead broker.
FAILOVER = ["--option", "kafka.request.timeout.ms=5000", "--option", "kafka.default.api.timeout.ms=10000"]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory):
    root = tmp_path_factory.mktemp("spark-cluster")
    samsa_cluster = Cluster(root / "samsa", **TXN).start()
    spark = SparkStandalone(root / "spark", workers=2, cores=2, memory="1g")
    try:
        spark.start()
        yield samsa_cluster, spark
    finally:
        spark.stop()
        samsa_cluster.stop()


def parquet_rows(table_dir: Path) -> list[dict]:
    """The rows of a Spark file sink's table: only the files its _spark_metadata log commits
    (a task that died may have left others beside them)."""
    import pyarrow.parquet as pq
    files: set[str] = set()
    for log in sorted((table_dir / "_spark_metadata").iterdir()):
        if log.name.startswith("."):
            continue
        for line in log.read_text().splitlines()[1:]:
            entry = json.loads(line)
            if entry.get("action", "add") == "add":
                files.add(entry["path"].removeprefix("file://"))
    return [r for f in sorted(files) for r in pq.read_table(f, partitioning=None).to_pylist()]


@pytest.mark.timeout(1200)  # JVMs on a shared two-core machine: minutes when it is loaded
def test_both_pipelines_on_a_spark_cluster_through_a_killed_worker_and_broker(clusters, tmp_path):
    samsa_cluster, spark = clusters
    bs = samsa_cluster.bootstrap
    cfg = PipelineConfig(bootstrap_servers=bs)
    ensure_topics(cfg, [payments.PAYMENTS, payments.DEAD_LETTERS, payments.DECISIONS])
    ensure_topics(cfg, [activity.EVENTS, activity.DEAD_LETTERS, activity.COUNTS])
    pay_clock = itertools.count(int(time.time() * 1000) - 600_000, 97).__next__
    txs = [v for _, v in itertools.islice(payments.generate(seed=11, clock=pay_clock, cards=120, malformed=0), 700)]
    ticks = itertools.count(START, 300)
    events = [v for _, v in itertools.islice(activity.generate(seed=7, clock=lambda: next(ticks), malformed=0), 1200)]
    send(bs, payments.PAYMENTS, iter((json.loads(v)["card_id"].encode(), v) for v in txs[:350]))
    send(bs, activity.EVENTS, iter((b"k", v) for v in events[:600]))

    t0 = time.monotonic()

    def mark(what: str) -> None:  # the phases' times, which pytest shows when the test fails
        print(f"{time.monotonic() - t0:6.1f} s {what}", flush=True)

    procs: dict[str, subprocess.Popen] = {}
    for name in ("payments", "activity"):
        log = open(tmp_path / f"{name}.log", "wb")
        procs[name] = subprocess.Popen(
            [sys.executable, "-m", "samsa.cli.main", "pipeline", "run", name, "--master", spark.url,
             "--bootstrap-server", bs, "--state-dir", str(tmp_path / name), "--source", "kafka",
             "--trigger-ms", "500", "--background-trigger-ms", "2000", *SMALL, *FAILOVER],
            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    for name in procs:  # both at once: 25-30 s less than one after the other
        wait_until(lambda: f"Pipeline {name}: reading" in (tmp_path / f"{name}.log").read_text(errors="replace")
                   or procs[name].poll() is not None, timeout=300, what=f"the {name} driver's session")
        mark(f"{name} driver up")

    def printed(name: str) -> str:
        return (tmp_path / f"{name}.log").read_text(errors="replace")[-4000:]

    def alive() -> None:
        for name, p in procs.items():
            assert p.poll() is None, f"{name} pipeline exited {p.returncode}:\n{printed(name)}"

    def exited() -> bool:
        return any(p.poll() is not None for p in procs.values())

    def ends(topic: str) -> int:  # records plus transaction markers: at least the records
        with samsa_cluster.admin() as admin:
            out = admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(2)})
        return sum(info.offset for info in out.values())

    def decisions() -> int:
        return len(read_committed(bs, payments.DECISIONS, partitions=2, timeout=20))

    def counts() -> int:
        return len(read_committed(bs, activity.COUNTS, partitions=2, timeout=20))

    def why() -> str:  # what a timed-out wait reports: the drivers' last words and the master's view
        state = spark.state() or {}
        apps = [(a.get("name"), a.get("state"), a.get("cores")) for a in state.get("activeapps", [])]
        workers = [(w.get("id"), w.get("state"), w.get("coresused")) for w in state.get("workers", [])]
        return "\n".join([f"spark apps {apps}, workers {workers}",
                          *(f"--- {name} driver:\n{printed(name)[-2500:]}" for name in procs)])

    def waited(predicate, timeout: float, what: str) -> None:
        try:
            wait_until(predicate, timeout=timeout, interval=1, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\n{why()}") from None

    try:
        waited(lambda: exited() or (ends(payments.DECISIONS) > 0 and ends(activity.COUNTS) > 0),
               timeout=420, what="the first decisions and counts")
        alive()
        mark("first decisions and counts")
        spark.kill_worker(1)
        samsa_cluster.brokers[1].kill()
        more = threading.Thread(target=lambda: (
            send(bs, payments.PAYMENTS, iter((json.loads(v)["card_id"].encode(), v) for v in txs[350:]), rate=500),
            send(bs, activity.EVENTS, iter((b"k", v) for v in events[600:]), rate=1000)))
        more.start()
        more.join()
        mark("killed, rest sent")
        want = activity_windows([json.loads(v) for v in events])
        waited(lambda: exited() or (ends(payments.DECISIONS) >= len(txs) and ends(activity.COUNTS) >= len(want)
                                    and decisions() >= len(txs) and counts() >= len(want)),
               timeout=300, what="every decision and count")
        alive()
        mark("every decision and count")
        # The archives trail (2 s triggers, joins wait for their watermark): wait for them too.
        waited(lambda: len(parquet_rows(tmp_path / "activity" / "warehouse" / activity.TABLE)) >= len(want)
               and len(parquet_rows(tmp_path / "payments" / "warehouse" / payments.TABLE)) > 0,
               timeout=120, what="the warehouse tables")
        mark("warehouse tables")
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)  # a clean stop; checkpoints hold where they are
        for name, p in procs.items():
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    mark("drivers stopped")
    check_one_decision_each(bs, txs)  # every transaction decided once, as the rules say
    got = {}
    for m in read_committed(bs, activity.COUNTS, partitions=2):  # written in transactions
        c = json.loads(m.value())
        k = (ms(c["window_start"]), c["dimension"], c["key"])
        assert k not in got, f"window {k} written twice"
        got[k] = (c["events"], c["page_views"], c["searches"], c["clicks"])
    assert got == want
    rows = parquet_rows(tmp_path / "activity" / "warehouse" / activity.TABLE)
    assert sorted((int(r["window_start"].timestamp() * 1000), r["dimension"], r["key"]) for r in rows) == sorted(want)
    archived = [r["tx_id"] for r in parquet_rows(tmp_path / "payments" / "warehouse" / payments.TABLE)]
    assert len(archived) == len(set(archived)) and set(archived) <= {json.loads(v)["tx_id"] for v in txs}
