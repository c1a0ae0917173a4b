"""Payment authorisation (the seeds' USE-04): card transactions as JSON on ``payments`` get
one approve/reject decision each on ``payment-decisions``, with no loss and no duplicates.

    {"tx_id": "tx-1-17", "card_id": "card-0042", "amount": 59.90, "currency": "EUR",
     "merchant": "m-0107", "country": "FR", "card_country": "FR", "ts": "2026-11-22T12:00:03.120Z"}

The rules engine rejects a transaction when
- its amount is over ``AMOUNT_LIMIT``;
- its card made more than ``VELOCITY_MAX`` transactions in the ``VELOCITY_WINDOW_MS`` up to
  it (event time, a sliding window kept per card in Spark's state store);
- it happens in another country than the card's.

Queries:
- ``payments-dead-letters``: transactions that are not valid go to ``payments-dead-letters``;
- ``payments-decide``: the rules, per card in event-time order (``applyInPandasWithState``
  over buckets of cards),
  to ``payment-decisions`` keyed by tx_id, exactly once across restarts: the ``samsa`` sink with
  ``exactlyOnce`` writes each micro-batch's decisions in transactions (read them read_committed);
- or, with ``cfg.realtime`` (a decision within 500 ms), ``payments-decide-realtime`` instead:
  all three rules in Spark's Real-Time Mode, with Spark's Kafka source and sink. The velocity
  rule keeps its per-card times in Spark's state store through ``transformWithState`` (a JVM
  processor, :mod:`samsa.spark.jvm`: Real-Time Mode runs no Python operator). Spark writes
  ``payment-decisions-realtime`` at least once, each decision tagged with its transaction's
  offset; an :class:`ExactlyOnceRelay` beside the query copies them to ``payment-decisions``
  exactly once, and the velocity rejections also to ``payment-velocity-alerts`` in the same
  transactions;
- ``payments-archive``: transactions joined with their decisions (a stream-stream join of the
  two topics) to Parquet for analysts;
- ``payments-archive-postgres``, with a PostgreSQL DSN configured: the same rows into the
  table ``decided_payments`` (:mod:`samsa.pipelines.postgres`).
"""

from __future__ import annotations

import json
import random
import warnings
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from samsa.client.consumer import Consumer
from samsa.client.types import TopicPartition
from samsa.pipelines.common import (PipelineConfig, Query, as_json, dead_letters, ensure_topics, field_of, read_topic,
                                    require, run_queries, selected, stop_queries, validate, with_options)
from samsa.pipelines.relay import SOURCE_HEADER, ExactlyOnceRelay, RelayThread, copied_up_to

# PySpark's own worker code concatenates empty frames, which pandas 2.x warns about on every batch.
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")

NAME = "payments"
PAYMENTS, DEAD_LETTERS, DECISIONS = "payments", "payments-dead-letters", "payment-decisions"
# In Real-Time Mode: the decisions as Spark wrote them (at least once, tagged), and the velocity rule's rejections
DECISIONS_TAGGED, VELOCITY_ALERTS = "payment-decisions-realtime", "payment-velocity-alerts"
TABLE = "decided_payments"
AMOUNT_LIMIT = 5000.0
VELOCITY_MAX = 5
VELOCITY_WINDOW_MS = 60_000
VELOCITY_LATE_MS = 600_000  # how far one partition may trail another (JOIN_WATERMARK)
# Session settings `samsa pipeline run` uses: one shuffle partition makes the decide query's
# micro-batch a third shorter on local[2] (fewer tasks to start), which is most of its latency.
SPARK_CONF = {"spark.sql.shuffle.partitions": "1"}
JOIN_WATERMARK = "10 minutes"
# Session settings of single queries. The velocity state forgets a quiet card after a while of
# processing time, which makes Spark run a micro-batch without data on every trigger (a busy loop
# at trigger 0, and --available-now never ends): only batches with data, which expire it too.
QUERY_CONF = {"payments-decide": {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}}

TX_FIELDS = ["tx_id", "card_id", "amount", "currency", "merchant", "country", "card_country"]


def parse(raw: DataFrame) -> DataFrame:
    amount = field_of("amount", "double")
    checks = [require("tx_id"), require("card_id"), require("amount", "double"),
              (amount <= 0, "field 'amount' is not positive"),
              require("currency"), (F.length(field_of("currency", "string")) != 3, "field 'currency' is not ISO 4217"),
              require("merchant"), require("country"), require("card_country"),
              (F.length(field_of("country", "string")) != 2, "field 'country' is not ISO 3166"),
              require("ts", "timestamp")]
    return validate(raw, checks)


def transactions(validated: DataFrame) -> DataFrame:
    """Good transactions: their fields, ``tx_time`` (event time), ``sent_ms`` (the record's
    timestamp), and where each was read (``source_partition``, ``source_offset``)."""
    return validated.where(F.col("reason").isNull()).select(
        *[field_of(f, "double" if f == "amount" else "string").alias(f) for f in TX_FIELDS],
        field_of("ts", "timestamp").alias("tx_time"), F.unix_millis("timestamp").alias("sent_ms"),
        F.col("partition").alias("source_partition"), F.col("offset").alias("source_offset"))


def with_decision(txs: DataFrame, velocity: Column) -> DataFrame:
    """The rules: ``reasons`` (amount limit, ``velocity`` — whether the card went over its
    velocity, worked out by :func:`decisions` — and country mismatch) and ``decision``."""
    reasons = F.filter(F.array(F.when(F.col("amount") > AMOUNT_LIMIT, F.lit("amount_limit")),
                               F.when(velocity, F.lit("velocity")),
                               F.when(F.col("country") != F.col("card_country"), F.lit("country_mismatch"))),
                       lambda r: r.isNotNull())
    return txs.withColumn("reasons", reasons).withColumn(
        "decision", F.when(F.size("reasons") > 0, F.lit("reject")).otherwise(F.lit("approve")))


def with_tx_ms(txs: DataFrame) -> DataFrame:
    return txs.select(*TX_FIELDS, F.unix_millis("tx_time").alias("tx_ms"), "sent_ms", "source_partition",
                      "source_offset")


def decisions(txs: DataFrame) -> DataFrame:
    """Every rule, in micro-batches and in Real-Time Mode alike: the velocity rule per card in
    Spark's state store through ``transformWithState`` (the JVM processor of
    :mod:`samsa.spark.jvm`: Real-Time Mode runs only JVM operators). A card quiet for
    VELOCITY_LATE_MS past the window leaves the state."""
    from samsa.spark.jvm import velocity
    checked = velocity(with_tx_ms(txs), "card_id", "tx_ms", VELOCITY_MAX, VELOCITY_WINDOW_MS,
                       VELOCITY_WINDOW_MS + VELOCITY_LATE_MS)
    return with_decision(checked, F.col("velocity"))


def velocity_alert(value: bytes) -> tuple[str, ...]:
    """Where the relay also copies a decision: to the alerts when the velocity rule rejected it."""
    return (VELOCITY_ALERTS,) if "velocity" in json.loads(value).get("reasons", ()) else ()


def decision_records(decided: DataFrame, tagged: bool = False) -> DataFrame:
    """Key tx_id, a JSON value with nothing in it that differs when a micro-batch runs again;
    ``tagged``: with the header of the transaction's offset that the relay reads."""
    value = as_json("tx_id", "card_id", "decision", "reasons", "amount", "currency", "merchant", "country",
                    "card_country", F.timestamp_millis("tx_ms").alias("tx_time"), "sent_ms")
    tag = F.array(F.struct(F.lit(SOURCE_HEADER).alias("key"), F.concat_ws(
        ":", "source_partition", "source_offset").cast("binary").alias("value"))).alias("headers")
    return decided.select(F.col("tx_id").alias("key"), value.alias("value"), *([tag] if tagged else []))


def parsed_decisions(raw: DataFrame) -> DataFrame:
    d = F.from_json(F.col("value").cast("string"),
                    "tx_id string, decision string, reasons array<string>, tx_time timestamp, sent_ms long")
    return raw.select(d.alias("d"), F.col("timestamp").alias("decided_at")).select("d.*", "decided_at")


def archive(txs: DataFrame, decided: DataFrame) -> DataFrame:
    """Transactions with their decisions; both sides keep state for JOIN_WATERMARK of event time."""
    t = txs.withWatermark("tx_time", JOIN_WATERMARK)
    d = decided.select(F.col("tx_id").alias("d_tx_id"), F.col("tx_time").alias("d_tx_time"), "decision", "reasons",
                       "decided_at").withWatermark("d_tx_time", JOIN_WATERMARK)
    joined = t.join(d, (t["tx_id"] == d["d_tx_id"]) & (t["tx_time"] == d["d_tx_time"]))
    return joined.select(*TX_FIELDS, "tx_time", "decision", "reasons", "decided_at",
                         (F.unix_millis("decided_at") - F.col("sent_ms")).alias("latency_ms"),
                         F.to_date("tx_time").alias("date"))


LATEST_LOOKBACK = 20  # records read back from each partition's end for the latest decision
URGENT = frozenset({"payments-decide"})  # the queries run at the pipeline's trigger; the others less often
REALTIME = frozenset({"payments-decide-realtime"})  # the queries cfg.realtime runs in Spark's Real-Time Mode


def queries(spark: SparkSession, cfg: PipelineConfig) -> list[tuple[str, Query]]:
    def validated() -> DataFrame:
        return parse(read_topic(spark, cfg, PAYMENTS))

    def dead() -> object:
        return with_options(dead_letters(validated()).writeStream, cfg, DEAD_LETTERS)

    def decide() -> object:
        out = decision_records(decisions(transactions(validated()))).writeStream.outputMode("append")
        # Spark's Kafka sink writes at least once: the decisions go through the samsa sink's
        # transactions whichever connector reads the transactions.
        return with_options(out, cfg, DECISIONS, connector="samsa").option("exactlyOnce", "true")

    def decide_now() -> object:
        # Spark's Kafka sink, whose producer sends each record as it comes: at least once, tagged for the relay.
        # Started again, the query decides its last batch again (for the velocity state); the decisions the
        # relay copied already are left out here, which spares writing and relaying them.
        decided = decisions(transactions(validated()))
        copied = copied_up_to(relay_config(cfg), DECISIONS_TAGGED, relay_group(cfg))
        if copied:
            up_to = F.create_map(*[F.lit(x) for p, o in sorted(copied.items()) for x in (p, o)])
            decided = decided.where(F.col("source_offset") > F.coalesce(up_to[F.col("source_partition")], F.lit(-1)))
        rows = decision_records(decided, tagged=True)
        return with_options(rows.writeStream.outputMode("update"), cfg, DECISIONS_TAGGED, connector="kafka")

    def joined() -> DataFrame:
        return archive(transactions(validated()),
                       parsed_decisions(read_topic(spark, cfg, DECISIONS, isolation="read_committed")))

    def store() -> object:
        return (joined().writeStream.format("parquet").outputMode("append").partitionBy("date")
                .option("path", cfg.warehouse(TABLE)))

    def store_sql() -> object:
        from samsa.pipelines.postgres import PostgresArchive
        return joined().writeStream.outputMode("append").foreachBatch(PostgresArchive(cfg.postgres or ""))

    deciding = [("payments-decide-realtime", decide_now)] if cfg.realtime else [("payments-decide", decide)]
    out: list[tuple[str, Query]] = [("payments-dead-letters", dead), *deciding, ("payments-archive", store)]
    if cfg.postgres:
        out.append(("payments-archive-postgres", store_sql))
    return out


def relay_config(cfg: PipelineConfig) -> dict[str, Any]:
    return {"bootstrap.servers": cfg.bootstrap_servers, **cfg.client_config()}


def relay_group(cfg: PipelineConfig) -> str:
    """The relay's consumer group and transactional id: this pipeline's own, across restarts."""
    return f"samsa-payments-relay-{cfg.instance_id()}"


@contextmanager
def relaying(spark: SparkSession, cfg: PipelineConfig) -> Iterator[None]:
    """While the queries run (with ``available_now``: after them, to the end), the Real-Time Mode
    decisions copied to ``payment-decisions`` exactly once; nothing without ``cfg.realtime`` or
    in the background process."""
    if not cfg.realtime or cfg.queries == "background":
        yield
        return
    relay = ExactlyOnceRelay(relay_config(cfg), DECISIONS_TAGGED, DECISIONS, relay_group(cfg), also=velocity_alert)
    relay.start()
    thread = None if cfg.available_now else RelayThread(relay, on_failure=lambda: stop_queries(spark, cfg))
    try:
        if thread is not None:
            thread.start()
        yield
        if thread is None:
            relay.drain()
    finally:
        try:
            if thread is not None:
                thread.stop()
        finally:
            relay.close()


def run(spark: SparkSession, cfg: PipelineConfig) -> None:
    ensure_topics(cfg, [PAYMENTS, DEAD_LETTERS, DECISIONS, *([DECISIONS_TAGGED, VELOCITY_ALERTS] if cfg.realtime else [])])
    latency = DecisionLatency(cfg)
    try:
        with relaying(spark, cfg):
            run_queries(selected(queries(spark, cfg), cfg), cfg, spark, status=latency.line, conf=QUERY_CONF)
    finally:
        latency.close()


class DecisionLatency:
    """The latest decision's latency, from the generator's send time to the decision's record."""

    def __init__(self, cfg: PipelineConfig):
        self.cfg = cfg
        self._consumer: Consumer | None = None

    def line(self) -> str | None:
        if self._consumer is None:
            self._consumer = Consumer({"bootstrap.servers": self.cfg.bootstrap_servers, "enable.auto.commit": False,
                                       "isolation.level": "read_committed"})
        ends = self._consumer.end_offsets([TopicPartition(DECISIONS, p) for p in range(self.cfg.partitions)])
        last = {tp: max(end - LATEST_LOOKBACK, 0) for tp, end in ends.items() if end > 0}  # markers end the log
        if not last:
            return None
        self._consumer.assign(list(last))
        for tp, offset in last.items():
            self._consumer.seek(tp, offset)
        latest = max(self._consumer.poll(2.0), key=lambda r: r.timestamp, default=None)
        if latest is None:
            return None
        sent_ms = json.loads(latest.value).get("sent_ms")
        return None if sent_ms is None else f"latest decision: {latest.timestamp - sent_ms} ms after it was sent"

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


# ---------------------------------------------------------------------------- the generator

COUNTRIES = {"FR": "EUR", "DE": "EUR", "ES": "EUR", "IT": "EUR", "NL": "EUR", "GB": "GBP", "US": "USD", "CH": "CHF"}


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def generate(seed: int = 0, clock: Callable[[], int] | None = None, cards: int = 5000,
             malformed: float = 0.005) -> Iterator[tuple[bytes, bytes]]:
    """Endless (key, value) transactions: everyday amounts (log-normal), a few large ones,
    cards mostly used at home, and now and then a card used in a quick burst."""
    rng = random.Random(seed)
    now = clock or (lambda: int(datetime.now(timezone.utc).timestamp() * 1000))
    homes = {c: rng.choice(list(COUNTRIES)) for c in range(cards)}
    burst: list[int] = []
    n = 0
    while True:
        n += 1
        if burst:
            card = burst.pop()
        else:
            card = rng.randrange(cards)
            if rng.random() < 0.002:
                burst = [card] * rng.randrange(4, 9)
        home = homes[card]
        country = home if rng.random() < 0.97 else rng.choice(list(COUNTRIES))
        amount = round(rng.uniform(5_000, 20_000), 2) if rng.random() < 0.003 else round(
            min(rng.lognormvariate(3.5, 1.0), 4_999.0), 2)
        tx: dict[str, Any] = {"tx_id": f"tx-{seed}-{n}", "card_id": f"card-{card:05d}", "amount": amount,
                              "currency": COUNTRIES[country], "merchant": f"m-{rng.randrange(2000):04d}",
                              "country": country, "card_country": home, "ts": iso(now())}
        value = json.dumps(tx, separators=(",", ":")).encode()
        if rng.random() < malformed:
            value = broken(rng, tx, value)
        yield tx["card_id"].encode(), value


def broken(rng: random.Random, tx: dict, value: bytes) -> bytes:
    how = rng.randrange(4)
    if how == 0:
        return value[: rng.randrange(1, len(value) - 1)]
    if how == 1:
        return json.dumps({**tx, "amount": "a lot"}).encode()
    if how == 2:
        return json.dumps({k: v for k, v in tx.items() if k != "card_id"}).encode()
    return json.dumps({**tx, "amount": -tx["amount"]}).encode()
