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
- ``payments-archive``: transactions joined with their decisions (a stream-stream join of the
  two topics) to Parquet for analysts;
- ``payments-archive-postgres``, with a PostgreSQL DSN configured: the same rows into the
  table ``decided_payments`` (:mod:`samsa.pipelines.postgres`).
"""

from __future__ import annotations

import json
import random
import warnings
from datetime import datetime, timezone
from typing import Any, Callable, Iterator

import pandas as pd
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from samsa.client.consumer import Consumer
from samsa.client.types import TopicPartition
from samsa.pipelines.common import (PipelineConfig, Query, as_json, dead_letters, ensure_topics, field_of, read_topic,
                                    require, run_queries, validate, with_options)

# PySpark's own worker code concatenates empty frames, which pandas 2.x warns about on every batch.
warnings.filterwarnings("ignore", category=FutureWarning, module="pyspark")

NAME = "payments"
PAYMENTS, DEAD_LETTERS, DECISIONS = "payments", "payments-dead-letters", "payment-decisions"
TABLE = "decided_payments"
AMOUNT_LIMIT = 5000.0
VELOCITY_MAX = 5
VELOCITY_WINDOW_MS = 60_000
CARD_BUCKETS = 16  # groups of cards in the rules' state (see decide_bucket)
# Session settings `samsa pipeline run` uses: one shuffle partition makes the decide query's
# micro-batch a third shorter on local[2] (fewer tasks to start), which is most of its latency.
SPARK_CONF = {"spark.sql.shuffle.partitions": "1"}
JOIN_WATERMARK = "10 minutes"

TX_FIELDS = ["tx_id", "card_id", "amount", "currency", "merchant", "country", "card_country"]
OUTPUT = [*TX_FIELDS, "tx_ms", "sent_ms", "decision", "reasons"]
DECISION_SCHEMA = ("tx_id string, card_id string, amount double, currency string, merchant string, country string, "
                   "card_country string, tx_ms long, sent_ms long, decision string, reasons array<string>")


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
    """Good transactions: their fields, ``tx_time`` (event time), ``sent_ms`` (the record's timestamp)."""
    return validated.where(F.col("reason").isNull()).select(
        *[field_of(f, "double" if f == "amount" else "string").alias(f) for f in TX_FIELDS],
        field_of("ts", "timestamp").alias("tx_time"), F.unix_millis("timestamp").alias("sent_ms"))


def decide_bucket(key: tuple, batches: Iterator[pd.DataFrame], state: GroupState) -> Iterator[pd.DataFrame]:
    """The new transactions of one bucket of cards, in event-time order, against the times of
    each card's recent ones. Cards are grouped in CARD_BUCKETS buckets rather than one group
    each: Spark calls this once per group and micro-batch, and a call costs about a millisecond,
    so a group per card could not keep up with a thousand cards a second."""
    frames = list(batches)
    txs = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    cols = {c: txs[c].tolist() for c in OUTPUT[:-2]}
    order = sorted(range(len(txs)), key=lambda i: (cols["tx_ms"][i], cols["tx_id"][i]))
    recent: dict[str, list[int]] = json.loads(state.get[0]) if state.exists else {}
    decisions, reasons = [], []
    for i in order:
        tx_ms, times = cols["tx_ms"][i], recent.setdefault(cols["card_id"][i], [])
        why = []
        if cols["amount"][i] > AMOUNT_LIMIT:
            why.append("amount_limit")
        if sum(1 for t in times if tx_ms - VELOCITY_WINDOW_MS < t <= tx_ms) + 1 > VELOCITY_MAX:
            why.append("velocity")
        if cols["country"][i] != cols["card_country"][i]:
            why.append("country_mismatch")
        decisions.append("reject" if why else "approve")
        reasons.append(why)
        times.append(int(tx_ms))
    # Keep only what a later transaction's window can reach: the state stays as small as the
    # traffic of the last VELOCITY_WINDOW_MS, however many cards there are.
    horizon = max(max(times) for times in recent.values()) - VELOCITY_WINDOW_MS
    kept = {card: [t for t in times if t > horizon] for card, times in recent.items()}
    state.update((json.dumps({card: times for card, times in kept.items() if times}, separators=(",", ":")),))
    out = {c: [v[i] for i in order] for c, v in cols.items()}
    out.update(decision=decisions, reasons=reasons)
    yield pd.DataFrame(out, columns=OUTPUT)


def decisions(txs: DataFrame) -> DataFrame:
    keyed = txs.select(*TX_FIELDS, F.unix_millis("tx_time").alias("tx_ms"), "sent_ms",
                       F.pmod(F.hash("card_id"), F.lit(CARD_BUCKETS)).alias("bucket"))
    return keyed.groupBy("bucket").applyInPandasWithState(
        # The state is JSON text: PySpark 4.3 cannot read back a state schema with an array.
        # No timeout: a processing-time one makes Spark run a micro-batch on every trigger (and
        # availableNow never ends); an event-time one drops transactions later than the
        # watermark, which would leave them without a decision.
        decide_bucket, DECISION_SCHEMA, "cards string", "append", GroupStateTimeout.NoTimeout)


def decision_records(decided: DataFrame) -> DataFrame:
    """Key tx_id, a JSON value with nothing in it that differs when a micro-batch runs again."""
    value = as_json("tx_id", "card_id", "decision", "reasons", "amount", "currency", "merchant", "country",
                    "card_country", F.timestamp_millis("tx_ms").alias("tx_time"), "sent_ms")
    return decided.select(F.col("tx_id").alias("key"), value.alias("value"))


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

    def joined() -> DataFrame:
        return archive(transactions(validated()),
                       parsed_decisions(read_topic(spark, cfg, DECISIONS, isolation="read_committed")))

    def store() -> object:
        return (joined().writeStream.format("parquet").outputMode("append").partitionBy("date")
                .option("path", cfg.warehouse(TABLE)))

    def store_sql() -> object:
        from samsa.pipelines.postgres import PostgresArchive
        return joined().writeStream.outputMode("append").foreachBatch(PostgresArchive(cfg.postgres or ""))

    out: list[tuple[str, Query]] = [("payments-dead-letters", dead), ("payments-decide", decide),
                                    ("payments-archive", store)]
    if cfg.postgres:
        out.append(("payments-archive-postgres", store_sql))
    return out


def run(spark: SparkSession, cfg: PipelineConfig) -> None:
    ensure_topics(cfg, [PAYMENTS, DEAD_LETTERS, DECISIONS])
    latency = DecisionLatency(cfg)
    try:
        run_queries(queries(spark, cfg), cfg, spark, status=latency.line)
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
