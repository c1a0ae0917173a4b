"""What the pipelines share: their settings, topics, JSON validation with a dead-letter topic,
and starting their streaming queries.

Every pipeline reads JSON events from a Samsa topic with the ``samsa`` source, or with Spark's own
Kafka connector (``source="kafka"``, the jar ``KAFKA_PACKAGE`` through ``spark.jars.packages``). An event
that is not valid (not JSON, not an object, a field missing or of the wrong type) goes to
the pipeline's dead-letter topic with the reason and where it came from; it never stops
the pipeline.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import DataStreamWriter, StreamingQuery

from samsa.client.admin import Admin
from samsa.client.types import NewTopic
from samsa.protocol import errors
from samsa.spark.exactly_once import stored_id

log = logging.getLogger("samsa.pipelines")

SOURCES = ("samsa", "kafka")  # the connectors a pipeline reads with (and writes its at-least-once topics with)
# Spark's Kafka connector for PySpark 4.3.0: 4.3.0 is not on Maven Central (its newest release there is
# 4.2.0), and 4.2.0's jar runs on Spark 4.3.0. The excluded jars are PySpark's own already (Ivy finds
# only their poms in a local ~/.m2 that Maven filled, and fails the session).
KAFKA_PACKAGE = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
KAFKA_EXCLUDES = ("at.yawk.lz4:lz4-java,org.xerial.snappy:snappy-java,org.apache.hadoop:hadoop-client-api,"
                  "org.apache.hadoop:hadoop-client-runtime,org.slf4j:slf4j-api")


def connector_conf(source: str) -> dict[str, str]:
    """The session settings a source needs: Spark's Kafka connector is a jar Spark fetches with Ivy."""
    if source not in SOURCES:
        raise ValueError(f"unknown source '{source}' (choose from {', '.join(SOURCES)})")
    return {"spark.jars.packages": KAFKA_PACKAGE, "spark.jars.excludes": KAFKA_EXCLUDES} if source == "kafka" else {}


@dataclass
class PipelineConfig:
    bootstrap_servers: str = "localhost:9092"
    state_dir: Path = Path("pipeline-data")  # checkpoints, the warehouse (Parquet), exactly-once notes
    trigger_ms: int = 0  # 0: the next micro-batch as soon as the last is done
    # Queries no one waits for (archives, dead letters) trigger this often at most, leaving the
    # cores to the urgent ones (a micro-batch costs about as much CPU for 10 records as for 1,000).
    background_trigger_ms: int = 5000
    urgent: frozenset[str] = frozenset()  # names of the queries that run at trigger_ms
    available_now: bool = False  # read what is there, then stop (queries run one after the other)
    partitions: int = 2  # of the topics the pipeline creates
    max_offsets_per_trigger: int | None = None
    postgres: str | None = None  # payments: also store decided transactions in PostgreSQL (a DSN)
    options: dict[str, str] = field(default_factory=dict)  # more source/sink options (kafka.*)
    # Events as Confluent Avro (value_format="avro"): decoded with this Schema Registry's schema
    # of "<topic>-value" (the samsa source's valueFormat=avro), then checked as the JSON ones are.
    value_format: str = "json"
    schema_registry_url: str | None = None
    # Where a query reads a topic from: None is the samsa source; bench/spark_bench.py puts
    # Parquet files of the same records in its place, to compare.
    reader: Callable[[SparkSession, "PipelineConfig", str], DataFrame] | None = None
    stop: threading.Event = field(default_factory=threading.Event)  # set by stop_queries()
    progress_s: float = 5.0  # how often run_queries prints a line per running query (0: never)
    source: str = "samsa"  # "kafka": Spark's own Kafka connector reads the topics (connector_conf)
    # Queries run in Spark's Real-Time Mode (the pipeline's REALTIME; empty: all in micro-batches).
    # Real-Time Mode reads only with Spark's Kafka source; a "batch" is how often it checkpoints.
    realtime: frozenset[str] = frozenset()
    realtime_batch_ms: int = 300_000
    # A Real-Time Mode query's first batch, this long; then the query starts again from its
    # checkpoint with realtime_batch_ms. A batch's end stops the decisions for a moment, the first
    # one in a JVM for longest (seconds: code run for the first time); so it falls in the cold
    # start, not in the steady state (0: no warm-up batch).
    realtime_warm_up_ms: int = 10_000
    # Which of them this process runs: "all"; "real-time" (those in Real-Time Mode) or "background"
    # (the others): two processes, the background one at a lower CPU priority (nice), so that its
    # micro-batches do not hold up the real-time decisions on a machine with few cores.
    queries: str = "all"

    def checkpoint(self, query: str) -> str:
        return str(self.state_dir / "checkpoints" / query)

    def warehouse(self, table: str) -> str:
        return str(self.state_dir / "warehouse" / table)

    def client_config(self) -> dict[str, str]:
        """The ``kafka.*`` options as Samsa client keys (security, timeouts), for the pipeline's own clients."""
        return {k[len("kafka."):]: v for k, v in self.options.items() if k.startswith("kafka.")}

    def instance_id(self) -> str:
        """This pipeline's own id, kept in its state directory: the same across restarts (the
        transactional ids of its exactly-once writers), another for another state directory."""
        return stored_id(self.state_dir / "instance-id")


def ensure_topics(cfg: PipelineConfig, names: list[str]) -> None:
    """Create the pipeline's topics if they are not there (replication factor: the broker's default)."""
    with Admin({"bootstrap.servers": cfg.bootstrap_servers}) as admin:
        existing = admin.list_topics()
        missing = [n for n in names if n not in existing]
        if missing:
            try:
                admin.create_topics([NewTopic(n, cfg.partitions) for n in missing])
            except errors.TopicAlreadyExistsError:
                pass


def read_topic(spark: SparkSession, cfg: PipelineConfig, topic: str, starting: str = "earliest",
               isolation: str = "read_uncommitted", events: bool = False) -> DataFrame:
    """``isolation="read_committed"`` for a topic written in transactions (only committed records);
    ``events``: the pipeline's input, in Avro when ``cfg.value_format`` says so."""
    if cfg.reader is not None:
        return cfg.reader(spark, cfg, topic)
    reader = (spark.readStream.format(cfg.source).option("kafka.bootstrap.servers", cfg.bootstrap_servers)
              .option("subscribe", topic).option("startingOffsets", starting)
              .option("kafka.isolation.level", isolation))
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for k, v in cfg.options.items():
        reader = reader.option(k, v)
    if events and cfg.value_format == "avro":
        if cfg.source != "samsa":
            raise ValueError("Avro events (a Schema Registry) need the samsa source")
        reader = reader.option("valueFormat", "avro").option("schema.registry.url", cfg.schema_registry_url or "")
    return reader.load()


# ---------------------------------------------------------------------------- validation

def field_of(name: str, type_: str) -> Column:
    """A field of the parsed event, or null if it is missing or not a ``type_``."""
    return F.try_variant_get(F.col("event"), f"$.{name}", type_)


def validate(raw: DataFrame, checks: list[tuple[Column, Column | str]]) -> DataFrame:
    """The source's columns plus ``event`` (the JSON as a VARIANT) and ``reason``: null for a good
    event, else why not (the first of ``checks``, pairs of (is bad, reason), that fails)."""
    text = F.col("value").cast("string")
    avro = "decodedValue" in raw.columns   # the samsa source's valueFormat=avro
    first: list[tuple[Column, Column | str]] = []
    if avro:
        text = F.when(F.col("decodedValue").isNotNull(), F.to_json("decodedValue")).otherwise(text)
        first.append((F.col("decodedValue").isNull() & F.col("value").isNotNull(),
                      "not Confluent Avro of the topic's value schema"))
    parsed = raw.withColumn("event", F.try_parse_json(text))
    first += [(F.col("event").isNull(), "malformed JSON"),
              (~F.schema_of_variant(F.col("event")).startswith("OBJECT"), "not a JSON object")]
    reason: Column | None = None
    for bad, why in first + checks:
        value = why if isinstance(why, Column) else F.lit(why)
        reason = F.when(bad, value) if reason is None else reason.when(bad, value)
    assert reason is not None
    return parsed.withColumn("reason", reason.otherwise(F.lit(None).cast("string")))


def require(name: str, type_: str = "string") -> tuple[Column, str]:
    value = field_of(name, type_)
    bad = value.isNull() | (F.trim(value) == "") if type_ == "string" else value.isNull()
    return bad, f"missing or bad field '{name}' (want {type_})"


def dead_letters(validated: DataFrame) -> DataFrame:
    """The bad events as dead-letter records: the original key, and a JSON value with the
    reason, where the event was, and the event itself (as text and base64, for bytes that are
    not UTF-8)."""
    bad = validated.where(F.col("reason").isNotNull())
    value = F.to_json(F.struct(
        F.col("reason"), F.col("topic").alias("source_topic"), F.col("partition").alias("source_partition"),
        F.col("offset").alias("source_offset"), F.col("timestamp").alias("source_timestamp"),
        F.col("value").cast("string").alias("value"), F.base64("value").alias("value_base64")))
    return bad.select(F.col("key"), value.alias("value"))


# ---------------------------------------------------------------------------- running

Query = Callable[[], DataStreamWriter]


def start(name: str, writer: DataStreamWriter, cfg: PipelineConfig, conf: dict[str, str] | None = None,
          warm_up: bool = False) -> StreamingQuery:
    """``conf``: session settings for this query alone (a query runs in a copy of the session
    made as it starts). ``warm_up``: a Real-Time Mode query's batches are
    ``cfg.realtime_warm_up_ms`` long (see :func:`warmed_up`)."""
    writer = writer.queryName(name).option("checkpointLocation", cfg.checkpoint(name))
    if cfg.available_now:
        writer = writer.trigger(availableNow=True)
    elif name in cfg.realtime:
        if cfg.source != "kafka":
            raise ValueError(f"{name} runs in Spark's Real-Time Mode, which reads only with Spark's Kafka source "
                             "(source 'kafka')")
        batch_ms = cfg.realtime_warm_up_ms if warm_up else cfg.realtime_batch_ms
        writer = writer.trigger(realTime=f"{batch_ms} milliseconds")
    else:
        every = cfg.trigger_ms if name in cfg.urgent else max(cfg.trigger_ms, cfg.background_trigger_ms)
        writer = writer.trigger(processingTime=f"{every} milliseconds")
    spark, conf = writer._spark, conf or {}
    before = {k: spark.conf.get(k, None) for k in conf}
    for k, v in conf.items():
        spark.conf.set(k, v)
    try:
        return writer.start()
    finally:
        for k, v in before.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)


def selected(queries: list[tuple[str, Query]], cfg: PipelineConfig) -> list[tuple[str, Query]]:
    """The queries this process runs (``cfg.queries``)."""
    if cfg.queries == "all":
        return queries
    return [(name, q) for name, q in queries if (name in cfg.realtime) == (cfg.queries == "real-time")]


def run_queries(queries: list[tuple[str, Query]], cfg: PipelineConfig, spark: SparkSession,
                status: Callable[[], str | None] | None = None,
                conf: dict[str, dict[str, str]] | None = None) -> None:
    """With ``available_now`` each query in turn reads what is there and stops (later queries
    read what earlier ones wrote); otherwise all run until one fails or the process is stopped,
    printing every ``progress_s`` a line per query and the pipeline's own ``status``. ``conf``:
    session settings of some queries alone, by name."""
    conf = conf or {}
    if cfg.available_now:
        for name, build in queries:
            if cfg.stop.is_set():
                return
            log.info("running %s to the end of its input", name)
            start(name, build(), cfg, conf.get(name)).awaitTermination()
        return
    spark.streams.resetTerminated()  # queries this session ran before would end the wait at once
    warm = 0 < cfg.realtime_warm_up_ms < cfg.realtime_batch_ms
    running = [start(name, build(), cfg, conf.get(name), warm_up=warm) for name, build in queries]
    if warm:
        running = [warmed_up(q, build, cfg, conf.get(q.name)) if q.name in cfg.realtime else q
                   for q, (_, build) in zip(running, queries)]
        if all(q.isActive for q in running):
            spark.streams.resetTerminated()  # the warm-up's stop is not an end

    def ended() -> bool:
        if not cfg.progress_s:
            spark.streams.awaitAnyTermination()  # (returns None, not True)
            return True
        return spark.streams.awaitAnyTermination(cfg.progress_s)
    try:
        while not ended():
            for q in running:
                print(progress_line(q), flush=True)
            line = status() if status is not None else None
            if line:
                print(line, flush=True)
    finally:
        for q in running:
            if q.isActive:
                q.stop()
        if not cfg.stop.is_set():  # a query stopped mid-batch on request may end with an error: not a failure
            for q in running:
                if q.exception() is not None:
                    raise q.exception()  # type: ignore[misc]


def warmed_up(q: StreamingQuery, build: Query, cfg: PipelineConfig,
              conf: dict[str, str] | None = None) -> StreamingQuery:
    """A Real-Time Mode query started with short batches (``cfg.realtime_warm_up_ms``): once its
    first batch has ended, it is stopped and started again from its checkpoint with
    ``cfg.realtime_batch_ms``. The second batch starts again from where the first one ended; what
    it had written already is written again, as after any restart (the relay copies it once)."""
    while q.isActive and not cfg.stop.is_set() and not (q.lastProgress or {}).get("durationMs"):
        q.awaitTermination(0.05)
    if not q.isActive or cfg.stop.is_set():
        return q  # failed (run_queries raises its error) or stopped on request
    q.stop()
    log.info("%s: first batch done; started again with %d ms batches", q.name, cfg.realtime_batch_ms)
    return start(q.name, build(), cfg, conf)


def progress_line(q: StreamingQuery) -> str:
    """``payments-decide: 41 micro-batches, the last 1,020 records (998/s) in 0.61 s``."""
    p = q.lastProgress
    if not p:
        return f"{q.name}: starting (no micro-batch done yet)"
    took = (p.get("durationMs") or {}).get("triggerExecution", 0) / 1000
    rate = p.get("processedRowsPerSecond") or 0.0
    return (f"{q.name}: {p['batchId'] + 1} micro-batches, the last {p['numInputRows']:,} records "
            f"({rate:,.0f}/s) in {took:.2f} s")


def stop_queries(spark: SparkSession, cfg: PipelineConfig) -> None:
    """Stop the pipeline from another thread (a signal handler): its queries end where they are,
    their checkpoints hold where to resume, and run_queries() returns."""
    cfg.stop.set()

    def stop_all() -> None:
        try:
            for q in spark.streams.active:
                q.stop()
        except Exception:  # noqa: BLE001 - the session stopped first (its JVM got the signal too): all stopped
            log.debug("stopping the queries", exc_info=True)
    threading.Thread(target=stop_all, name="stop-pipeline", daemon=True).start()


def with_options(writer: DataStreamWriter, cfg: PipelineConfig, topic: str,
                 connector: str | None = None) -> DataStreamWriter:
    """A sink to ``topic`` with the pipeline's connector (at least once), or ``connector``."""
    writer = writer.format(connector or cfg.source).option("kafka.bootstrap.servers", cfg.bootstrap_servers).option("topic", topic)
    for k, v in cfg.options.items():
        writer = writer.option(k, v)
    return writer


def as_json(*columns: str | Column) -> Column:
    return F.to_json(F.struct(*columns))
