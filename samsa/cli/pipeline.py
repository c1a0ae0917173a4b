"""``samsa pipeline``: run the seeds' data pipelines on Spark, and feed them.

    samsa pipeline run payments --embedded           # a broker on localhost:9092 (a child process), then the pipeline
    samsa pipeline generate payments --rate 1000     # in another terminal: 1,000 transactions a second

``run`` starts a local Spark (``--master``, local[2] by default) with the ``samsa``
source and sink (``--source kafka``: Spark's own Kafka connector reads the topics), creates the pipeline's topics if needed, and runs its streaming queries
until stopped (Ctrl-C), or with ``--available-now`` until they have read what is there.
Checkpoints, the warehouse (Parquet) and the embedded broker's data go under
``--state-dir``, so a pipeline run again resumes where it stopped.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib
import logging
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from samsa.cli.common import Parser, UsageError, error_message, run_tool
from samsa.client.metadata import parse_bootstrap_servers
from samsa.pipelines import DESCRIPTIONS, INPUTS, PIPELINES

DESCRIPTION = "Run the data pipelines on Spark with the samsa connector, and feed them generated events."


def _epilog() -> str:
    lines = ["pipelines:"] + [f"  {name:<10} {text}" for name, text in DESCRIPTIONS.items()]
    lines += ["", "Two commands against a broker the pipeline starts (and stops) itself:",
              "  samsa pipeline run payments --embedded",
              "  samsa pipeline generate payments --rate 1000"]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="samsa pipeline", description=DESCRIPTION, epilog=_epilog(),
               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="{run,generate}", parser_class=Parser)
    run = sub.add_parser("run", help="run a pipeline's streaming queries", epilog=_epilog(),
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("pipeline", choices=list(PIPELINES), help="which pipeline")
    run.add_argument("--bootstrap-server", default="localhost:9092", metavar="HOST:PORT",
                     help="the Samsa (or Kafka) broker to use (default: localhost:9092)")
    run.add_argument("--embedded", action="store_true",
                     help="first start a Samsa broker in a child process, listening on --bootstrap-server, "
                     "with its data in STATE_DIR/broker; it stops with the pipeline")
    run.add_argument("--state-dir", type=Path, metavar="DIR",
                     help="checkpoints, warehouse and embedded broker data (default: ./pipeline-data/PIPELINE)")
    run.add_argument("--trigger-ms", type=int, default=0, metavar="MS",
                     help="micro-batch interval; 0 starts the next as soon as the last is done (default: 0)")
    run.add_argument("--background-trigger-ms", type=int, default=5000, metavar="MS",
                     help="micro-batch interval of the queries no one waits for: archives, dead letters "
                     "(default: 5000)")
    run.add_argument("--available-now", action="store_true",
                     help="read what is in the topics now, then stop")
    run.add_argument("--max-offsets-per-trigger", type=int, metavar="N", help="at most N records a micro-batch")
    run.add_argument("--partitions", type=int, default=2, metavar="N",
                     help="partitions of the topics the pipeline creates (default: 2)")
    run.add_argument("--postgres", metavar="DSN",
                     help="payments: also store decided transactions in this PostgreSQL database "
                     "(e.g. 'host=localhost dbname=payments user=me')")
    run.add_argument("--schema-registry-url", metavar="URL",
                     help="activity: the events are Confluent Avro (subject activity-events-value), decoded with "
                     "this Schema Registry")
    run.add_argument("--master", help="Spark master (default: local[2]; with --real-time local[N] with N the "
                     "partitions + 1: Real-Time Mode keeps a task slot per partition and one for the velocity rule's "
                     "stage for the whole batch)")
    run.add_argument("--source", choices=("samsa", "kafka"), default="samsa",
                     help="the connector that reads the topics: samsa (Python, needs nothing more) or kafka "
                     "(Spark's spark-sql-kafka-0-10 jar, fetched through spark.jars.packages); decisions and "
                     "counts are written exactly once by samsa's sink either way (default: samsa)")
    run.add_argument("--real-time", action="store_true",
                     help="payments: decide in Spark's Real-Time Mode (needs --source kafka): all three rules "
                     "(amount, velocity per card, country) decide each transaction within a few hundred ms, "
                     "written exactly once; the velocity rejections also go to payment-velocity-alerts")
    run.add_argument("--real-time-batch-ms", type=int, default=300_000, metavar="MS",
                     help="with --real-time: how long a Real-Time Mode batch runs between checkpoints; each end of a "
                     "batch holds the decisions a few hundred ms, and a restart decides up to a batch again "
                     "(default: 300000)")
    run.add_argument("--real-time-warm-up-ms", type=int, default=10_000, metavar="MS",
                     help="with --real-time: the first batch this long, then the query starts again with "
                     "--real-time-batch-ms; the first end of a batch holds the decisions longest, so it falls in "
                     "the cold start (0: no warm-up batch; default: 10000)")
    run.add_argument("--queries", choices=("all", "real-time", "background"), default="all",
                     help="with --real-time: all the pipeline's queries (the real-time one and its relay here, the "
                     "micro-batch ones in a child process at a lower CPU priority, nice 19, that this one starts "
                     "and stops), only the real-time one, or only the micro-batch ones (default: all)")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                     help="a Spark setting, e.g. spark.jars.packages=... or spark.executor.memory=512m")
    run.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                     help="more options of the samsa source and sink, e.g. kafka.request.timeout.ms=5000")
    gen = sub.add_parser("generate", help="feed a pipeline generated events with Samsa's producer",
                         epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    gen.add_argument("pipeline", choices=list(PIPELINES), help="which pipeline's events")
    gen.add_argument("--bootstrap-server", default="localhost:9092", metavar="HOST:PORT",
                     help="the broker to send to (default: localhost:9092)")
    gen.add_argument("--rate", type=float, default=100, metavar="N",
                     help="events a second; 0 sends as fast as the producer can (default: 100)")
    gen.add_argument("--count", type=int, metavar="N", help="stop after N events")
    gen.add_argument("--seconds", type=float, metavar="S", help="stop after S seconds")
    gen.add_argument("--seed", type=int,
                     help="random seed: the same seed, the same events (and ids); default: a new one each run")
    gen.add_argument("--malformed", type=float, metavar="FRACTION",
                     help="share of events sent broken, for the dead-letter topic (default: the pipeline's)")
    return p


def _require_spark() -> None:
    """The pipelines (and their generators' modules) need PySpark, an optional extra."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise UsageError("the pipelines run on Spark, and PySpark is not installed here: "
                         "pip install -e '.[spark]' (./test installs it)") from None


def _options(pairs: list[str], flag: str = "--option") -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} wants KEY=VALUE, got '{pair}'")
        out[key.strip()] = value.strip()
    return out


def _child(cmd: list[str], nice: int = 0, log: Path | None = None) -> subprocess.Popen:
    """A process this one starts and stops: it gets SIGTERM when this process ends, however it
    ends (PR_SET_PDEATHSIG); its output goes to ``log`` if given."""
    def prepare() -> None:
        if nice:
            os.nice(nice)
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    out = open(log, "ab") if log is not None else None
    try:
        return subprocess.Popen([sys.executable, "-m", "samsa.cli.main", *cmd], preexec_fn=prepare,
                                stdout=out, stderr=subprocess.STDOUT if out is not None else None)
    finally:
        if out is not None:
            out.close()


def _background(argv: list[str]) -> subprocess.Popen:
    """The micro-batch queries of a --real-time pipeline in a child process at nice 19, so that
    their bursts of work wait for the real-time decisions on a machine with few cores."""
    args = [a for a in argv if a != "--embedded"]  # this process's broker serves the child too
    return _child(["pipeline", *args, "--queries", "background"], nice=19)


def _broker(opts: argparse.Namespace, state_dir: Path) -> tuple[subprocess.Popen, str]:
    """--embedded: a Samsa broker (``samsa server start``) in a child process, not in this one,
    whose Python the pipeline's own clients (the relay, the latency line) keep busy: a broker
    sharing their interpreter lock fell tens of seconds behind (BENCHMARKS.md, issue 32)."""
    try:
        [(host, port)] = parse_bootstrap_servers(opts.bootstrap_server)  # PLAINTEXT://h:p too, as clients read it
    except ValueError:
        raise UsageError(f"--bootstrap-server must be one HOST:PORT with --embedded, got '{opts.bootstrap_server}'") \
            from None
    host = host or "127.0.0.1"
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        pass
    else:
        raise UsageError(f"something is already listening on {host}:{port} (another broker?); stop it, or leave "
                         "out --embedded to use it")
    data = (state_dir / "broker").resolve()
    data.mkdir(parents=True, exist_ok=True)
    props = data.parent / "broker.properties"
    props.write_text(f"listeners=PLAINTEXT://{host}:{port}\nlog.dirs={data}\nnum.partitions={opts.partitions}\n"
                     "broker.id=0\noffsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n"
                     "transaction.state.log.min.isr=1\nshare.coordinator.state.topic.replication.factor=1\n"
                     "share.coordinator.state.topic.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n")
    log = data.parent / "broker.log"
    proc = _child(["server", "start", str(props)], log=log)
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None:
                raise UsageError(f"the embedded broker exited with {proc.returncode}: see {log}")
            if time.monotonic() > deadline:
                proc.terminate()
                raise UsageError(f"the embedded broker did not listen on {host}:{port} within 60 s")
            time.sleep(0.1)
    return proc, f"Embedded Samsa broker (pid {proc.pid}) listening on {host}:{port}, data in {data}, log in {log}"


def _supervise(child: subprocess.Popen, on_exit: Any) -> threading.Thread:
    """Calls ``on_exit(code)`` when the child ends."""
    t = threading.Thread(target=lambda: on_exit(child.wait()), name="background-queries", daemon=True)
    t.start()
    return t


def _run(opts: argparse.Namespace, argv: list[str]) -> int:
    module: Any = importlib.import_module(PIPELINES[opts.pipeline])
    from samsa.pipelines.common import PipelineConfig
    state_dir = opts.state_dir or Path("pipeline-data") / opts.pipeline
    cfg = PipelineConfig(bootstrap_servers=opts.bootstrap_server, state_dir=state_dir.resolve(),
                         trigger_ms=opts.trigger_ms, available_now=opts.available_now, partitions=opts.partitions,
                         max_offsets_per_trigger=opts.max_offsets_per_trigger, options=_options(opts.option),
                         postgres=opts.postgres, background_trigger_ms=opts.background_trigger_ms,
                         value_format="avro" if opts.schema_registry_url else "json",
                         schema_registry_url=opts.schema_registry_url,
                         urgent=getattr(module, "URGENT", frozenset()),
                         source=opts.source, realtime_batch_ms=opts.real_time_batch_ms,
                         realtime_warm_up_ms=opts.real_time_warm_up_ms,
                         realtime=getattr(module, "REALTIME", frozenset())
                         if opts.real_time else frozenset(),
                         queries="real-time" if opts.real_time and opts.queries == "all" else opts.queries)
    conf = _options(opts.conf, "--conf")
    if opts.real_time and opts.pipeline != "payments":
        raise UsageError("--real-time is an option of the payments pipeline")
    if opts.real_time and opts.source != "kafka":
        raise UsageError("--real-time needs --source kafka: Spark's Real-Time Mode reads only with its Kafka source")
    if opts.real_time and opts.available_now:
        raise UsageError("--real-time and --available-now do not go together")
    if opts.queries != "all" and not opts.real_time:
        raise UsageError("--queries needs --real-time (it splits the real-time query from the others)")
    if opts.real_time_batch_ms <= 0:
        raise UsageError(f"--real-time-batch-ms must be positive, got {opts.real_time_batch_ms}")
    if opts.real_time_warm_up_ms < 0:
        raise UsageError(f"--real-time-warm-up-ms must not be negative, got {opts.real_time_warm_up_ms}")
    if opts.postgres and opts.pipeline != "payments":
        raise UsageError("--postgres is an option of the payments pipeline")
    if opts.schema_registry_url and opts.pipeline != "activity":
        raise UsageError("--schema-registry-url is an option of the activity pipeline")
    if opts.schema_registry_url and opts.source != "samsa":
        raise UsageError("--schema-registry-url needs --source samsa (it decodes each record's Avro schema)")
    broker = None
    if opts.embedded:
        broker, started = _broker(opts, state_dir)
        print(started, flush=True)
    # --real-time with all its queries: the micro-batch ones in a child process at a lower priority
    child = _background(argv) if opts.real_time and opts.queries == "all" else None
    try:
        import samsa.spark
        from samsa.pipelines.common import connector_conf
        settings = {**module.SPARK_CONF, **connector_conf(opts.source), **conf}
        master = opts.master or (f"local[{opts.partitions + 1}]" if opts.real_time and opts.queries != "background"
                                 else "local[2]")
        spark = samsa.spark.local_session(f"samsa-pipeline-{opts.pipeline}", master=master, **settings)
        print(f"Pipeline {opts.pipeline}: reading {INPUTS[opts.pipeline]} at {cfg.bootstrap_servers} "
              f"with the {opts.source} source, "
              f"state in {cfg.state_dir}", flush=True)
        from samsa.pipelines.common import stop_queries
        for sig in (signal.SIGTERM, signal.SIGINT):  # stop the queries cleanly, not mid-call into the JVM
            signal.signal(sig, lambda *_: stop_queries(spark, cfg))
        child_failed: list[int] = []
        if child is not None:
            def ended(code: int) -> None:
                if code in (0, -signal.SIGTERM, -signal.SIGINT):  # stopped as this one is (Ctrl-C reaches both)
                    stop_queries(spark, cfg)
                elif not cfg.stop.is_set():
                    child_failed.append(code)
                    print(f"samsa pipeline: the micro-batch queries' process (pid {child.pid}) exited with "
                          f"{code}; stopping", file=sys.stderr, flush=True)
                    stop_queries(spark, cfg)
            _supervise(child, ended)
        try:
            module.run(spark, cfg)
        finally:
            spark.stop()
            if child is not None and child.poll() is None:
                child.terminate()  # its queries stop where they are, as this process's did
                child.wait()
        if child_failed:
            return 1
        if cfg.stop.is_set():
            print(f"Pipeline {opts.pipeline} stopped; run it again to resume from its checkpoints", flush=True)
    finally:
        if broker is not None:
            broker.terminate()  # after the pipeline's clients are done with it
            broker.wait()
    return 0


def _brief(e: BaseException) -> str:
    """Spark's errors carry Python tracebacks and JVM stacks: the line that says what went wrong."""
    text = error_message(e)
    causes = [line.strip() for line in text.splitlines()
              if re.match(r"^\s*(samsa\.[\w.]+|[A-Z]\w*(Error|Exception)): ", line)]
    return causes[-1] if causes else text.splitlines()[0] if text else type(e).__name__


def _generate(opts: argparse.Namespace) -> int:
    from samsa.pipelines.feed import send
    module: Any = importlib.import_module(PIPELINES[opts.pipeline])
    kwargs = {} if opts.malformed is None else {"malformed": opts.malformed}
    if opts.rate < 0:
        raise UsageError(f"--rate must not be negative, got {opts.rate}")
    seed = opts.seed if opts.seed is not None else random.randrange(1 << 31)
    events = module.generate(seed, **kwargs)

    def progress(sent: int, elapsed: float) -> None:
        print(f"{sent} events sent in {elapsed:.1f} s", file=sys.stderr, flush=True)

    sent, elapsed = send(opts.bootstrap_server, INPUTS[opts.pipeline], events, rate=opts.rate, count=opts.count,
                         seconds=opts.seconds, progress=progress)
    print(f"{sent} events sent to {INPUTS[opts.pipeline]} in {elapsed:.1f} s "
          f"({sent / elapsed if elapsed else 0:.0f}/s), seed {seed}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_tool(argv, build_parser(), lambda opts: _tool(opts, argv), description=DESCRIPTION,
                    usage="samsa pipeline: {}")


def _tool(opts: argparse.Namespace, argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING, format="[%(asctime)s] %(levelname)s %(message)s (%(name)s)")
    if opts.command is None:
        raise UsageError("choose a command: run or generate")
    try:
        _require_spark()
        return _run(opts, argv) if opts.command == "run" else _generate(opts)
    except UsageError:
        raise
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - one clear line, not a traceback
        print(f"samsa pipeline: {_brief(e)}", file=sys.stderr)
        return 1
