"""Spark on Samsa: the connector's read rate and the pipelines' throughput, each beside Spark
reading the same records from Parquet files in the same run; and the payment pipeline's
send-to-decision latency at a fixed rate. Not a test: it prints figures (and writes them
to bench/results/spark-<time>.json).

    .venv/bin/python bench/spark_bench.py                      # 1M events a pipeline, latency at 1,000 tx/s
    .venv/bin/python bench/spark_bench.py --events 100000 --latency-seconds 30
    .venv/bin/python bench/spark_bench.py --master standalone:2x1 --skip reads,latency,parquet   # events/s per core

The broker is a process of its own (Samsa's embedded broker). Spark is local[2] with a 4 GB
driver, or (``--master``) local[N], a standalone cluster the bench starts on this machine
(``standalone:WxC``: a master and W workers of C cores, samsa.spark.standalone; executors of C
cores and 1 GB, W×C cores in all), or your own ``spark://HOST:PORT``. The pipelines' rates are
also given per executor core (N, W×C, or ``spark.cores.max``). The Parquet files hold exactly what the connector reads (the Kafka columns), so
the pipelines run the same plan on either input; their outputs go to Samsa topics either way.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
START_MS = 1_767_225_600_000  # 2026-01-01: event times of the throughput runs, 20 ms apart


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BrokerProcess:
    """A broker in a process of its own: Samsa's embedded broker (the same server as ``samsa server
    start``), run so that ``samsa server stop`` elsewhere on this shared machine leaves it alone."""

    CODE = ("import signal, sys, samsa.embedded as e; "
            "b = e.Broker({'listeners': sys.argv[1], 'log.dirs': sys.argv[2], 'num.partitions': sys.argv[3]}); "
            "b.start(); signal.sigwait({signal.SIGTERM, signal.SIGINT}); b.stop()")

    def __init__(self, workdir: Path, partitions: int):
        self.port = free_port()
        self.workdir = workdir
        self.log = open(workdir / "broker.log", "wb")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # inherited, so sigwait() gets it
        try:
            self.proc = subprocess.Popen([PY, "-c", self.CODE, f"PLAINTEXT://127.0.0.1:{self.port}",
                                          str(workdir / "data"), str(partitions)],
                                         cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.time() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"broker did not start: {(workdir / 'broker.log').read_text()[-2000:]}")
                time.sleep(0.1)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def timed(fn: Callable[[], Any]) -> float:
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def fill(bootstrap: str, module: Any, events: int, partitions: int) -> float:
    """``events`` of the pipeline's generator (event times 20 ms apart) into its input topic."""
    from samsa.pipelines.common import PipelineConfig, ensure_topics
    from samsa.pipelines.feed import send
    ensure_topics(PipelineConfig(bootstrap_servers=bootstrap, partitions=partitions), [INPUTS[module.NAME]])
    clock = itertools.count(START_MS, 20).__next__
    sent, secs = send(bootstrap, INPUTS[module.NAME], module.generate(seed=1, clock=clock), count=events)
    print(f"  {sent:,} {module.NAME} events sent with Samsa's producer in {secs:.1f} s ({sent / secs:,.0f}/s)",
          flush=True)
    return sent / secs


def snapshot(spark: Any, bootstrap: str, topic: str, path: Path, files: int) -> int:
    """The topic's records, as the connector reads them, into ``files`` Parquet files."""
    df = (spark.read.format("samsa").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load())
    df.repartition(files).write.mode("overwrite").parquet(str(path))
    return spark.read.parquet(str(path)).count()


def read_rates(spark: Any, bootstrap: str, topic: str, path: Path, n: int) -> dict[str, float]:
    """Records/s of a plain read into Spark's no-op sink, batch and streaming: samsa, Parquet, and
    a Python source handing out pre-built Arrow batches (bench/arrow_ceiling.py)."""
    from samsa.spark.schema import kafka_schema

    def samsa_batch() -> None:
        (spark.read.format("samsa").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
         .write.format("noop").mode("overwrite").save())

    def parquet_batch() -> None:
        spark.read.parquet(str(path)).write.format("noop").mode("overwrite").save()

    def samsa_stream() -> None:
        q = (spark.readStream.format("samsa").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").load().writeStream.format("noop")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="cp-")).trigger(availableNow=True).start())
        q.awaitTermination()

    def parquet_stream() -> None:
        q = (spark.readStream.schema(kafka_schema(False)).parquet(str(path)).writeStream.format("noop")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="cp-")).trigger(availableNow=True).start())
        q.awaitTermination()

    # Streaming reads in micro-batches: one Parquet file each, and as many records each from samsa.
    per_trigger = max(1, n // len(list(path.glob("*.parquet"))))

    def samsa_stream_limited() -> Any:
        q = (spark.readStream.format("samsa").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
             .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", str(per_trigger)).load()
             .writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp(prefix="cp-"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        return q

    def parquet_stream_limited() -> Any:
        q = (spark.readStream.schema(kafka_schema(False)).option("maxFilesPerTrigger", "1").parquet(str(path))
             .writeStream.format("noop").option("checkpointLocation", tempfile.mkdtemp(prefix="cp-"))
             .trigger(availableNow=True).start())
        q.awaitTermination()
        return q

    def ceiling_batch() -> None:
        spark.read.format("arrow-ceiling").option("rows", n).load().write.format("noop").mode("overwrite").save()

    def ceiling_stream() -> None:
        q = (spark.readStream.format("arrow-ceiling").option("rows", n).load().writeStream.format("noop")
             .option("checkpointLocation", tempfile.mkdtemp(prefix="cp-")).trigger(availableNow=True).start())
        q.awaitTermination()

    out = {}
    for name, fn in [("samsa batch read", samsa_batch), ("parquet batch read", parquet_batch),
                     ("ceiling batch read", ceiling_batch), ("samsa streaming read", samsa_stream),
                     ("parquet streaming read", parquet_stream), ("ceiling streaming read", ceiling_stream),
                     ("samsa streaming read, 10 micro-batches", samsa_stream_limited),
                     ("parquet streaming read, 10 micro-batches", parquet_stream_limited)]:
        fn()  # once to warm up (JIT, Python workers, the broker's page cache)
        runs = []
        for _ in range(2):
            start = time.monotonic()
            q = fn()
            runs.append((time.monotonic() - start, q))
        secs, q = min(runs, key=lambda r: r[0])
        out[name] = n / secs
        line = f"  {name:<42} {n / secs:>10,.0f} records/s ({secs:.1f} s)"
        if q is not None:  # micro-batches after the first, without the query's start and end
            busy = [p for p in q.recentProgress if p["numInputRows"] > 0][1:]
            steady = sum(p["numInputRows"] for p in busy) / sum(p["durationMs"]["triggerExecution"] / 1000 for p in busy)
            out[name + " (steady)"] = steady
            line += f", {steady:,.0f} records/s in its micro-batches after the first"
        print(line, flush=True)
    return out


def warm_up(spark: Any, module: Any, workdir: Path, partitions: int, with_parquet: bool = True) -> None:
    """A small run of both variants first: Spark's first runs of a plan are slow (code generation,
    JIT, Python workers starting), and the run measured first would pay for it."""
    wd = workdir / f"warm-up-{module.NAME}"
    wd.mkdir()
    b = BrokerProcess(wd, partitions)
    try:
        from samsa.pipelines.common import PipelineConfig
        from samsa.pipelines.feed import send
        from samsa.pipelines.common import ensure_topics
        ensure_topics(PipelineConfig(bootstrap_servers=b.bootstrap, partitions=partitions), [INPUTS[module.NAME]])
        clock = itertools.count(START_MS, 20).__next__
        send(b.bootstrap, INPUTS[module.NAME], module.generate(seed=2, clock=clock), count=20_000)
        pipeline_rate(spark, module, b.bootstrap, wd, 20_000, None, 10_000)
        if with_parquet:
            parquet = wd / "in.parquet"
            snapshot(spark, b.bootstrap, INPUTS[module.NAME], parquet, files=2)
            pipeline_rate(spark, module, b.bootstrap, wd, 20_000, parquet, 10_000)
    finally:
        b.stop()
        shutil.rmtree(wd, ignore_errors=True)


def pipeline_rate(spark: Any, module: Any, bootstrap: str, workdir: Path, n: int, parquet: Path | None,
                  per_trigger: int, source: str = "samsa") -> float:
    """Events/s of the whole pipeline (every query, one after the other, to the end of its input)."""
    from samsa.pipelines.common import PipelineConfig
    from samsa.spark.schema import kafka_schema
    reader = None
    if parquet is not None:
        def reader(spark_: Any, cfg: PipelineConfig, topic: str) -> Any:
            if topic == INPUTS[module.NAME]:
                return (spark_.readStream.schema(kafka_schema(False)).option("maxFilesPerTrigger", "1")
                        .parquet(str(parquet)))
            return (spark_.readStream.format("samsa").option("kafka.bootstrap.servers", cfg.bootstrap_servers)
                    .option("subscribe", topic).option("startingOffsets", "earliest")
                    .option("maxOffsetsPerTrigger", str(per_trigger)).load())
    state = workdir / f"{module.NAME}-{'parquet' if parquet else source}"
    cfg = PipelineConfig(bootstrap_servers=bootstrap, state_dir=state, available_now=True,
                         max_offsets_per_trigger=per_trigger, reader=reader, source=source)
    spark.conf.set("spark.sql.shuffle.partitions", module.SPARK_CONF.get("spark.sql.shuffle.partitions", "2"))
    secs = timed(lambda: module.run(spark, cfg))
    shutil.rmtree(state, ignore_errors=True)
    return n / secs


LATENCY_RUNS = {"pipeline": "whole pipeline", "decide": "decide query only",
                "passthrough": "pass-through query (Spark's floor)",
                "kafka-decide": "decide query only, read by Spark's Kafka source",
                "rtm-stateful": "Real-Time Mode, the decide query (velocity state) on Spark's Kafka source and sink",
                "rtm-stateless": "Real-Time Mode, amount and country rules (no state), Spark's Kafka source and sink "
                                 "(at least once)",
                "realtime": "the pipeline with --real-time: Real-Time Mode decisions through the exactly-once "
                            "relay, velocity rule, dead letters and archive beside it",
                "realtime-decide": "Real-Time Mode decide query and the exactly-once relay, nothing beside them",
                "realtime-split": "the pipeline with --real-time in two processes: the real-time query and relay "
                                  "(--queries real-time), the micro-batch queries under nice 10 (--queries background)"}
RTM_BATCH_MS = 30_000  # Real-Time Mode's batch duration: how often it checkpoints, not a latency


def real_time(spark: Any, cfg: Any, stateful: bool) -> Any:
    """The decide query alone in Real-Time Mode with Spark's Kafka source and sink: the whole rules
    engine (``stateful``; its velocity rule keeps per-card state in applyInPandasWithState) or
    only the rules that need no state (amount limit, country mismatch)."""
    from samsa.pipelines import payments
    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", cfg.bootstrap_servers)
           .option("subscribe", payments.PAYMENTS).option("startingOffsets", "latest").load())
    txs = payments.transactions(payments.parse(raw))
    decided = payments.decisions(txs) if stateful else payments.stateless_decisions(txs)
    return (payments.decision_records(decided).writeStream.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap_servers).option("topic", payments.DECISIONS)
            # The decide query's own mode; in "update" Spark refuses it already ("applyInPandasWithState
            # in append mode is not supported with Update output mode").
            .outputMode("append" if stateful else "update")
            .option("checkpointLocation", cfg.checkpoint("rtm")).trigger(realTime=f"{RTM_BATCH_MS} milliseconds"))


def passthrough(spark: Any, cfg: Any) -> Any:
    """The least a query can do: each transaction's send time, copied to the decisions topic by
    the samsa sink. Its latency is what any query on this Spark and machine starts from."""
    from pyspark.sql import functions as F
    from samsa.pipelines import payments
    from samsa.pipelines.common import as_json, read_topic, with_options
    copied = read_topic(spark, cfg, payments.PAYMENTS).select(
        "key", as_json(F.unix_millis("timestamp").alias("sent_ms")).alias("value"))
    return with_options(copied.writeStream, cfg, payments.DECISIONS)


def latency(spark: Any, bootstrap: str, workdir: Path, rate: int, seconds: float, warmup: float,
            trigger_ms: int, run: str, background_ms: int) -> dict[str, float]:
    """Payments at ``rate`` tx/s into running queries (``run``: a key of LATENCY_RUNS); the times
    from each transaction's send to a consumer (read_committed) receiving its decision."""
    from samsa.client.consumer import Consumer, TopicPartition
    from samsa.pipelines import payments
    from samsa.pipelines.common import PipelineConfig, ensure_topics, start, stop_queries
    from samsa.pipelines.feed import send
    cfg = PipelineConfig(bootstrap_servers=bootstrap, state_dir=workdir / f"latency-{trigger_ms}-{run}",
                         trigger_ms=trigger_ms, urgent=payments.URGENT | {"passthrough"},
                         background_trigger_ms=background_ms,
                         source="kafka" if run == "kafka-decide" or run.startswith("realtime") else "samsa",
                         realtime=payments.REALTIME if run.startswith("realtime") else frozenset(),
                         realtime_batch_ms=RTM_BATCH_MS, progress_s=0,
                         queries="real-time" if run == "realtime-split" else "all")
    ensure_topics(cfg, [payments.PAYMENTS, payments.DEAD_LETTERS, payments.DECISIONS, payments.DECISIONS_TAGGED])
    if run == "passthrough":
        measured, queries = "passthrough", [("passthrough", lambda: passthrough(spark, cfg))]
    elif run.startswith("rtm-"):
        measured, queries = "rtm", [("rtm", lambda: real_time(spark, cfg, run == "rtm-stateful"))]
    elif run in ("realtime", "realtime-split"):
        measured, queries = "", []  # payments.run() starts them, and the relay
    elif run == "realtime-decide":
        measured = "payments-decide-realtime"
        queries = [q for q in payments.queries(spark, cfg) if q[0] == measured]
    else:
        measured = "payments-decide"
        queries = [q for q in payments.queries(spark, cfg) if q[0] == measured or run == "pipeline"]
    for k, v in payments.SPARK_CONF.items():
        spark.conf.set(k, v)
    stop = threading.Event()
    samples: list[tuple[float, float]] = []  # (received at, latency ms)
    decided: dict[str, int] = {}  # tx_id -> decisions received

    def consume() -> None:
        c = Consumer({"bootstrap.servers": bootstrap, "auto.offset.reset": "latest", "enable.auto.commit": False,
                      "isolation.level": "read_committed"})
        tps = [TopicPartition(payments.DECISIONS, p) for p in range(2)]
        c.assign(tps)
        c.seek_to_end(tps)
        while not stop.is_set():
            for r in c.poll(0.2):
                now = time.time() * 1000
                d = json.loads(r.value)
                samples.append((now, now - d["sent_ms"]))
                decided[d["tx_id"]] = decided.get(d["tx_id"], 0) + 1
        c.close()

    begin = 0.0

    def drive() -> None:
        nonlocal begin
        time.sleep(20)  # the queries' first (slow) micro-batches, with no data yet
        reader = threading.Thread(target=consume)
        reader.start()
        begin = time.time() * 1000
        send(bootstrap, payments.PAYMENTS, payments.generate(seed=3), rate=rate, seconds=warmup + seconds)
        time.sleep(5)
        stop.set()
        reader.join()

    failed = None
    busy: list[dict] = []
    if run in ("realtime", "realtime-split"):
        background = None
        if run == "realtime-split":  # the micro-batch queries in a process of their own, at a lower CPU priority
            background = subprocess.Popen(
                ["nice", "-n", "10", PY, "-m", "samsa.cli.main", "pipeline", "run", "payments", "--bootstrap-server",
                 bootstrap, "--state-dir", str(cfg.state_dir), "--source", "kafka", "--real-time", "--queries",
                 "background", "--background-trigger-ms", str(background_ms), "--conf", "spark.driver.memory=1g"],
                cwd=ROOT, stdout=open(workdir / "background.log", "wb"), stderr=subprocess.STDOUT)
        driver = threading.Thread(target=lambda: (drive(), stop_queries(spark, cfg)))
        driver.start()
        try:
            payments.run(spark, cfg)  # until drive() stops it
        except Exception as e:  # noqa: BLE001 - a failed run is a result
            failed = e
            stop.set()
        driver.join()
        if background is not None:
            background.terminate()  # stops its queries where they are
            background.wait()
    else:
        # Started from this thread: the samsa source is registered with this thread's Spark session.
        try:
            running = [build().start() if name == "rtm" else start(name, build(), cfg) for name, build in queries]
        except Exception as e:  # noqa: BLE001 - Spark refusing a design is a result: its own words
            return {"refused": str(e).strip().splitlines()[0][:600]}
        with payments.relaying(spark, cfg):  # the realtime-decide run's relay (cfg.realtime: only that run)
            drive()
        query = running[[name for name, _ in queries].index(measured)]
        busy = [p for p in query.recentProgress if p["numInputRows"] > 0]
        failed = query.exception()
        for q in running:
            q.stop()
    if failed is not None:
        return {"failed": str(failed).strip().splitlines()[0][:600], "decisions": len(samples)}
    kept = sorted(lat for at, lat in samples if at >= begin + warmup * 1000)
    if not kept:
        return {"decisions": 0}
    pct = statistics.quantiles(kept, n=100)
    out: dict[str, Any] = {"decisions": len(kept), "p50_ms": pct[49], "p99_ms": pct[98], "max_ms": kept[-1],
                           "decided twice": sum(1 for n in decided.values() if n > 1)}
    worst: dict[int, float] = {}  # the slowest decision received in each second of the run: where the tail is
    for at, lat in samples:
        if at >= begin + warmup * 1000:
            second = int((at - begin) / 1000)
            worst[second] = max(worst.get(second, 0.0), lat)
    out["worst per second"] = [round(worst.get(i, 0)) for i in range(max(worst) + 1)] if worst else []
    # Where a micro-batch of the decide (or pass-through) query spends its time (Spark's durationMs, averaged)
    if busy:
        out["micro-batch rows"] = statistics.mean(p["numInputRows"] for p in busy)
        for phase in ("triggerExecution", "addBatch", "queryPlanning", "walCommit", "commitOffsets", "latestOffset"):
            out[f"{phase} ms"] = statistics.mean(p["durationMs"].get(phase, 0) for p in busy)
    return out


INPUTS = {"activity": "activity-events", "payments": "payments"}


def start_spark(master: str, conf: dict[str, str], workdir: Path) -> tuple[Any, Any, int | None]:
    """The session on ``master`` (see the module's doc), the standalone cluster started for it
    (or None), and the executor cores the tasks have (None when unknown)."""
    import re
    import samsa.spark
    cluster, cores = None, None
    if m := re.fullmatch(r"local\[(\d+)\]", master):
        cores = int(m.group(1))
    elif m := re.fullmatch(r"standalone:(\d+)x(\d+)", master):
        from samsa.spark.standalone import SparkStandalone
        workers, per_worker = int(m.group(1)), int(m.group(2))
        cores = workers * per_worker
        cluster = SparkStandalone(workdir / "spark-standalone", workers=workers, cores=per_worker,
                                  memory="1536m").start()
        conf = {"spark.executor.cores": str(per_worker), "spark.cores.max": str(cores),
                "spark.executor.memory": "1g", **conf}
        master = cluster.url
    elif master.startswith("spark://"):
        cores = int(conf["spark.cores.max"]) if "spark.cores.max" in conf else None
    else:
        raise SystemExit(f"--master {master}: want local[N], standalone:WxC or spark://HOST:PORT")
    try:
        return samsa.spark.local_session("samsa-bench", master=master, **conf), cluster, cores
    except BaseException:
        if cluster is not None:
            cluster.stop()
        raise


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="events per pipeline (default 1,000,000)")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--per-trigger", type=int, default=100_000, help="maxOffsetsPerTrigger of the pipeline runs")
    ap.add_argument("--latency-rate", default="1000", help="tx/s of the latency runs: one, or a comma list to sweep")
    ap.add_argument("--latency-seconds", type=float, default=60)
    ap.add_argument("--latency-warmup", type=float, default=15)
    ap.add_argument("--triggers", default="0,500", help="trigger intervals (ms) of the latency runs")
    ap.add_argument("--latency-runs", default="pipeline,decide,passthrough",
                    help=f"comma list of the latency runs, of: {', '.join(LATENCY_RUNS)}")
    ap.add_argument("--background-trigger", type=int, default=5000,
                    help="trigger interval (ms) of the pipeline's other queries in the latency runs")
    ap.add_argument("--skip", default="", help="comma list of: reads,activity,payments,latency,kafka-source,parquet")
    ap.add_argument("--master", default="local[2]",
                    help="local[N], standalone:WxC (a master and W workers of C cores, started here) or spark://HOST:PORT")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting (repeatable)")
    ap.add_argument("--workdir", type=Path)
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="spark-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)

    from samsa.pipelines import activity, payments
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "bench"), os.environ.get("PYTHONPATH")]))
    sys.path.insert(0, str(ROOT / "bench"))
    from arrow_ceiling import CeilingSource  # Python workers import it too: hence PYTHONPATH
    from samsa.pipelines.common import connector_conf
    conf = {"spark.driver.memory": "4g", **connector_conf("kafka"), **dict(kv.split("=", 1) for kv in args.conf)}
    spark, cluster, cores = start_spark(args.master, conf, workdir)
    spark.dataSource.register(CeilingSource)
    results: dict[str, Any] = {"events": args.events, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "conf": conf,
                               "master": args.master, "executor cores": cores, "loadavg_before": os.getloadavg()}
    broker = BrokerProcess(workdir, args.partitions)
    try:
        for module in (activity, payments):
            if module.NAME in skip and (module is payments or "reads" in skip):
                continue
            print(f"{module.NAME}:", flush=True)
            results[f"{module.NAME} produce/s"] = fill(broker.bootstrap, module, args.events, args.partitions)
            parquet = workdir / f"{module.NAME}.parquet"
            if "parquet" not in skip or (module is activity and "reads" not in skip):
                snapshot(spark, broker.bootstrap, INPUTS[module.NAME], parquet,
                         files=max(1, args.events // args.per_trigger))
            if module is activity and "reads" not in skip:
                results["reads"] = read_rates(spark, broker.bootstrap, INPUTS[module.NAME], parquet, args.events)
            if module.NAME in skip:
                continue
            warm_up(spark, module, workdir, args.partitions, with_parquet="parquet" not in skip)
            rates = {"samsa": pipeline_rate(spark, module, broker.bootstrap, workdir, args.events, None,
                                            args.per_trigger)}
            if "parquet" not in skip:
                (workdir / "parquet-run").mkdir(exist_ok=True)
                other = BrokerProcess(workdir / "parquet-run", args.partitions)  # the Parquet run's outputs
                try:
                    rates["parquet"] = pipeline_rate(spark, module, other.bootstrap, workdir, args.events, parquet,
                                                     args.per_trigger)
                finally:
                    other.stop()
                    shutil.rmtree(workdir / "parquet-run", ignore_errors=True)
            if "kafka-source" not in skip:  # the same events on a broker of their own, read by Spark's Kafka source
                (workdir / "kafka-run").mkdir(exist_ok=True)
                other = BrokerProcess(workdir / "kafka-run", args.partitions)
                try:
                    fill(other.bootstrap, module, args.events, args.partitions)
                    rates["kafka"] = pipeline_rate(spark, module, other.bootstrap, workdir, args.events, None,
                                                   args.per_trigger, source="kafka")
                finally:
                    other.stop()
                    shutil.rmtree(workdir / "kafka-run", ignore_errors=True)
                print(f"  pipeline from Spark's Kafka source {rates['kafka']:>10,.0f} events/s", flush=True)
            results[f"{module.NAME} pipeline"] = rates
            print(f"  pipeline from samsa   {rates['samsa']:>10,.0f} events/s", flush=True)
            if "parquet" in rates:
                print(f"  pipeline from parquet {rates['parquet']:>10,.0f} events/s   "
                      f"(samsa / parquet: {rates['samsa'] / rates['parquet']:.2f})", flush=True)
            if cores:
                results[f"{module.NAME} pipeline per executor core"] = {k: v / cores for k, v in rates.items()}
                print(f"  per executor core ({cores}): " +
                      ", ".join(f"{k} {v / cores:,.0f}" for k, v in rates.items()) + " events/s", flush=True)
        broker.stop()
        if "latency" not in skip:
            for rate, trigger, run in itertools.product([int(r) for r in args.latency_rate.split(",")],
                                                         [int(t) for t in args.triggers.split(",")],
                                                         args.latency_runs.split(",")):
                lat_dir = workdir / f"latency-broker-{rate}-{trigger}-{run}"
                lat_dir.mkdir()
                b = BrokerProcess(lat_dir, args.partitions)
                try:
                    r = latency(spark, b.bootstrap, lat_dir, rate, args.latency_seconds,
                                args.latency_warmup, trigger, run, args.background_trigger)
                finally:
                    b.stop()
                what = LATENCY_RUNS[run]
                r["loadavg"] = os.getloadavg()[0]
                results[f"latency {rate} tx/s trigger={trigger}ms {what}"] = r
                print(f"latency at {rate} tx/s, trigger {trigger} ms, {what}: " +
                      ", ".join(f"{k} {v:,.0f}" if isinstance(v, (int, float)) else f"{k}: {v}"
                                for k, v in r.items() if k != "worst per second"), flush=True)
    finally:
        if broker.proc.poll() is None:
            broker.stop()
        spark.stop()
        if cluster is not None:
            cluster.stop()
    results["loadavg_after"] = os.getloadavg()
    out = ROOT / "bench" / "results" / f"spark-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print(f"results in {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
