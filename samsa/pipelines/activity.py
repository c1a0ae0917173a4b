"""Activity tracking (the seeds' USE-02): page views, searches and clicks, as JSON on
``activity-events``, counted per page and per user in 1-minute event-time windows.

    {"event_id": "e-17", "type": "search", "user_id": "u-42", "page": "/search",
     "ts": "2026-11-22T12:00:03.120Z", "query": "red shoes"}

Three streaming queries:

- ``activity-dead-letters``: events that are not valid go to ``activity-dead-letters``;
- ``activity-counts-live``: each window's counts, once the watermark has passed its end
  (late events up to ``watermark`` are still counted), to ``activity-counts`` for live
  monitoring, keyed ``page:/home`` or ``user:u-42``, exactly once (ExactlyOnceWriter, in
  transactions: read it read_committed);
- ``activity-counts-warehouse``: the same counts to Parquet, partitioned by date, for the
  warehouse (Spark's file sink: exactly once).
"""

from __future__ import annotations

import json
import random
from datetime import datetime, timezone
from typing import Callable, Iterator

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from samsa.pipelines.common import (PipelineConfig, Query, as_json, dead_letters, ensure_topics, field_of, read_topic,
                                    require, run_queries, validate, with_options)
from samsa.spark.exactly_once import ExactlyOnceWriter

NAME = "activity"
EVENTS, DEAD_LETTERS, COUNTS = "activity-events", "activity-dead-letters", "activity-counts"
TABLE = "activity_counts"
SPARK_CONF: dict[str, str] = {}  # session settings `samsa pipeline run` adds
TYPES = ("page_view", "search", "click")
WINDOW = "1 minute"
# The events in Avro (subject activity-events-value), for a feed that writes Confluent Avro
AVRO_SCHEMA = {"type": "record", "name": "ActivityEvent", "namespace": "samsa.pipelines.activity", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "type", "type": "string"}, {"name": "user_id", "type": "string"},
    {"name": "page", "type": "string"}, {"name": "ts", "type": "string"},
    {"name": "query", "type": ["null", "string"], "default": None},
    {"name": "element", "type": ["null", "string"], "default": None}]}
WATERMARK = "1 minute"


def parse(raw: DataFrame) -> DataFrame:
    kind = field_of("type", "string")
    checks = [require("event_id"), require("type"),
              (~kind.isin(*TYPES), F.concat(F.lit("unknown event type '"), kind, F.lit("'"))),
              require("user_id"), require("page"),
              (~field_of("page", "string").startswith("/"), "field 'page' is not a path"),
              require("ts", "timestamp")]
    return validate(raw, checks)


def events_of(validated: DataFrame) -> DataFrame:
    return validated.where(F.col("reason").isNull()).select(
        field_of("ts", "timestamp").alias("ts"), field_of("type", "string").alias("type"),
        field_of("user_id", "string").alias("user_id"), field_of("page", "string").alias("page"))


def counts(events: DataFrame, watermark: str = WATERMARK) -> DataFrame:
    """Per (window, dimension, key): events, page_views, searches, clicks; dimension is page or user."""
    dims = events.withWatermark("ts", watermark).select(
        "ts", "type", F.explode(F.array(F.struct(F.lit("page").alias("dimension"), F.col("page").alias("key")),
                                        F.struct(F.lit("user").alias("dimension"), F.col("user_id").alias("key"))))
        .alias("d"))
    agg = dims.groupBy(F.window("ts", WINDOW).alias("window"), F.col("d.dimension").alias("dimension"),
                       F.col("d.key").alias("key")).agg(
        F.count(F.lit(1)).alias("events"),
        *[F.sum((F.col("type") == t).cast("long")).alias(col) for t, col in
          zip(TYPES, ("page_views", "searches", "clicks"))])
    return agg.select(F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end"),
                      "dimension", "key", "events", "page_views", "searches", "clicks")


URGENT = frozenset({"activity-counts-live"})  # the queries run at the pipeline's trigger; the others less often


def queries(spark: SparkSession, cfg: PipelineConfig) -> list[tuple[str, Query]]:
    def validated() -> DataFrame:
        return parse(read_topic(spark, cfg, EVENTS, events=True))

    def dead() -> object:
        return with_options(dead_letters(validated()).writeStream, cfg, DEAD_LETTERS)

    def live() -> object:
        out = counts(events_of(validated()))
        records = out.select(F.concat_ws(":", "dimension", "key").alias("key"),
                             as_json("window_start", "window_end", "dimension", "key", "events", "page_views",
                                     "searches", "clicks").alias("value"))
        writer = ExactlyOnceWriter(cfg.bootstrap_servers, COUNTS, cfg.state_dir / "exactly-once" / COUNTS,
                                   cfg.options)
        return records.writeStream.outputMode("append").foreachBatch(writer)

    def warehouse() -> object:
        out = counts(events_of(validated())).withColumn("date", F.to_date("window_start"))
        return (out.writeStream.format("parquet").outputMode("append").partitionBy("date")
                .option("path", cfg.warehouse(TABLE)))

    return [("activity-dead-letters", dead), ("activity-counts-live", live), ("activity-counts-warehouse", warehouse)]


def run(spark: SparkSession, cfg: PipelineConfig) -> None:
    ensure_topics(cfg, [EVENTS, DEAD_LETTERS, COUNTS])
    run_queries(queries(spark, cfg), cfg, spark)


# ---------------------------------------------------------------------------- the generator

PAGES = ["/", "/home", "/search", "/cart", "/checkout", "/account", "/help"] + \
        [f"/products/{i}" for i in range(40)] + [f"/blog/{i}" for i in range(10)]
QUERIES = ["red shoes", "laptop", "gift ideas", "coffee", "headphones", "desk lamp", "rain jacket"]


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generate(seed: int = 0, clock: Callable[[], int] | None = None, users: int = 2000,
             malformed: float = 0.01) -> Iterator[tuple[bytes, bytes]]:
    """Endless (key, value) events: a few popular pages, heavy and light users, searches
    that lead to clicks; ``malformed`` of them broken in one of the ways real feeds are."""
    rng = random.Random(seed)
    now = clock or (lambda: int(datetime.now(timezone.utc).timestamp() * 1000))
    page_weights = [1 / (i + 1) for i in range(len(PAGES))]
    n = 0
    while True:
        n += 1
        user = f"u-{int(rng.paretovariate(1.2)) % users}"
        kind = rng.choices(TYPES, (70, 15, 15))[0]
        page = "/search" if kind == "search" else rng.choices(PAGES, page_weights)[0]
        event = {"event_id": f"e-{seed}-{n}", "type": kind, "user_id": user, "page": page, "ts": iso(now())}
        if kind == "search":
            event["query"] = rng.choice(QUERIES)
        elif kind == "click":
            event["element"] = rng.choice(["add-to-cart", "buy", "link", "banner"])
        value = json.dumps(event, separators=(",", ":")).encode()
        if rng.random() < malformed:
            value = broken(rng, event, value)
        yield user.encode(), value


def broken(rng: random.Random, event: dict, value: bytes) -> bytes:
    how = rng.randrange(6)
    if how == 0:
        return value[: rng.randrange(1, len(value) - 1)]  # cut short
    if how == 1:
        return b"[" + value + b"]"  # not an object
    if how == 2:
        return json.dumps({k: v for k, v in event.items() if k != "user_id"}).encode()
    if how == 3:
        return json.dumps({**event, "type": "hover"}).encode()
    if how == 4:
        return json.dumps({**event, "ts": "yesterday"}).encode()
    return b"\xff\xfe" + value  # not UTF-8
