"""The payments pipeline: every transaction gets exactly one decision, the one the rules give
(worked out here independently), also when the pipeline's process (``samsa pipeline run``) is
killed (SIGKILL to the driver, its JVM and its Python workers) and started again."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict

import psycopg
import pytest

from samsa.client.admin import Admin
from samsa.client.producer import Producer
from samsa.client.types import TopicPartition
from samsa.pipelines import payments
from samsa.pipelines.common import PipelineConfig, ensure_topics
from samsa.pipelines.feed import send
from spark_helpers import ms, read_committed, read_topic
from waiting import wait_until

BAD = [
    (b'{"tx_id": "bad-1", "card_id": "card-00001", "amount": 12.5', "malformed JSON"),
    (b'{"tx_id": "bad-2", "card_id": "card-00001", "amount": "a lot", "currency": "EUR", "merchant": "m-1", '
     b'"country": "FR", "card_country": "FR", "ts": "2026-01-01T00:00:00Z"}', "missing or bad field 'amount' (want double)"),
    (b'{"tx_id": "bad-3", "card_id": "card-00001", "amount": -3, "currency": "EUR", "merchant": "m-1", '
     b'"country": "FR", "card_country": "FR", "ts": "2026-01-01T00:00:00Z"}', "field 'amount' is not positive"),
    (b'{"tx_id": "bad-4", "amount": 3, "currency": "EUR", "merchant": "m-1", '
     b'"country": "FR", "card_country": "FR", "ts": "2026-01-01T00:00:00Z"}', "missing or bad field 'card_id' (want string)"),
    (b'{"tx_id": "bad-5", "card_id": "card-00001", "amount": 3, "currency": "EURO", "merchant": "m-1", '
     b'"country": "FR", "card_country": "FR", "ts": "2026-01-01T00:00:00Z"}', "field 'currency' is not ISO 4217"),
]


def expected_decisions(values: list[bytes]) -> dict[str, tuple[str, list[str]]]:
    """The rules, worked out here: per card in event-time order (the test clocks never repeat a time)."""
    by_card: dict[str, list[dict]] = defaultdict(list)
    for v in values:
        tx = json.loads(v)
        by_card[tx["card_id"]].append(tx)
    out = {}
    for txs in by_card.values():
        txs.sort(key=lambda t: ms(t["ts"]))
        for i, tx in enumerate(txs):
            t = ms(tx["ts"])
            reasons = []
            if tx["amount"] > payments.AMOUNT_LIMIT:
                reasons.append("amount_limit")
            if sum(1 for p in txs[:i] if ms(p["ts"]) > t - payments.VELOCITY_WINDOW_MS) + 1 > payments.VELOCITY_MAX:
                reasons.append("velocity")
            if tx["country"] != tx["card_country"]:
                reasons.append("country_mismatch")
            out[tx["tx_id"]] = ("reject" if reasons else "approve", reasons)
    return out


class PaymentsFeed:
    """Generated transactions (every one valid, 200 cards, times 7 ms apart) sent to the payments
    topic, ``n`` at a time; ``sent`` holds every value sent."""

    def __init__(self, bootstrap: str, seed: int):
        self.bootstrap = bootstrap
        clock = itertools.count(int(time.time() * 1000), 7).__next__
        self.events = payments.generate(seed=seed, clock=clock, cards=200, malformed=0)
        self.sent: list[bytes] = []

    def __call__(self, n: int, rate: float = 0) -> None:
        batch = list(itertools.islice(self.events, n))
        self.sent.extend(v for _, v in batch)
        send(self.bootstrap, payments.PAYMENTS, iter(batch), rate=rate)


def decisions_in(bootstrap: str) -> list:
    return read_committed(bootstrap, payments.DECISIONS, partitions=2)  # written in transactions


def check_one_decision_each(bootstrap: str, values: list[bytes]) -> dict:
    expected = expected_decisions(values)
    got: dict[str, tuple[str, list[str]]] = {}
    for m in decisions_in(bootstrap):
        d = json.loads(m.value())
        assert m.key() == d["tx_id"].encode()
        assert d["tx_id"] not in got, f"{d['tx_id']} decided twice"
        got[d["tx_id"]] = (d["decision"], d["reasons"])
    assert got == expected
    kinds = {r for _, reasons in got.values() for r in reasons}
    assert kinds == {"amount_limit", "velocity", "country_mismatch"}  # the data exercises every rule
    return got


def check_archive(spark, cfg: PipelineConfig, decided: dict) -> None:
    rows = spark.read.parquet(cfg.warehouse(payments.TABLE)).collect()
    assert sorted(r.tx_id for r in rows) == sorted(decided)  # each transaction once
    for r in rows:
        assert (r.decision, list(r.reasons)) == decided[r.tx_id]
        assert r.decided_at is not None and r.latency_ms is not None


@pytest.mark.parametrize("source", ["samsa", "kafka"])  # kafka: Spark's own connector, read_committed included
def test_payment_decisions_dead_letters_and_archives(spark, fresh_broker, postgres, tmp_path, source):
    bs = fresh_broker.bootstrap_servers
    cfg = PipelineConfig(bootstrap_servers=bs, state_dir=tmp_path, available_now=True, max_offsets_per_trigger=400,
                         postgres=postgres.dsn, source=source)
    ensure_topics(cfg, [payments.PAYMENTS, payments.DEAD_LETTERS, payments.DECISIONS])
    clock = itertools.count(int(time.time() * 1000) - 600_000, 97).__next__  # 97 ms apart, never the same time
    good = [v for _, v in itertools.islice(payments.generate(seed=11, clock=clock, cards=120, malformed=0), 700)]
    with Producer({"bootstrap.servers": bs}) as p:
        for i, v in enumerate(good):
            p.send(payments.PAYMENTS, v, key=json.loads(v)["card_id"].encode())
            if i % 150 == 0 and i // 150 < len(BAD):
                p.send(payments.PAYMENTS, BAD[i // 150][0], key=b"bad")
        p.flush()

    payments.run(spark, cfg)

    decided = check_one_decision_each(bs, good)
    dead = [json.loads(m.value()) for m in read_topic(bs, payments.DEAD_LETTERS, partitions=2)]
    assert sorted((d["value"].encode(), d["reason"]) for d in dead) == sorted(BAD)
    check_archive(spark, cfg, decided)
    with psycopg.connect(postgres.dsn) as conn:
        rows = conn.execute("SELECT tx_id, decision, reasons, tx_time, decided_at FROM decided_payments").fetchall()
    assert {tx: (d, list(r)) for tx, d, r, _, _ in rows} == decided
    stamps = {json.loads(v)["tx_id"]: ms(json.loads(v)["ts"]) for v in good}
    assert all(int(t.timestamp() * 1000) == stamps[tx] and at is not None for tx, _, _, t, at in rows)


def test_every_transaction_one_decision_across_a_killed_pipeline(spark, fresh_broker, tmp_path):
    bs = fresh_broker.bootstrap_servers
    state = tmp_path / "state"
    cmd = [sys.executable, "-m", "samsa.cli.main", "pipeline", "run", "payments", "--bootstrap-server", bs,
           "--state-dir", str(state), "--trigger-ms", "100"]
    feed = PaymentsFeed(bs, seed=5)

    def decided() -> int:
        with Admin({"bootstrap.servers": bs}) as admin:
            ends = admin.list_offsets({TopicPartition(payments.DECISIONS, p): "latest" for p in range(2)})
        return sum(info.offset for info in ends.values())

    ensure_topics(PipelineConfig(bootstrap_servers=bs), [payments.PAYMENTS, payments.DEAD_LETTERS, payments.DECISIONS])
    feed(400)
    log = open(tmp_path / "pipeline.log", "wb")
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(lambda: decided() > 0 or proc.poll() is not None, timeout=240, what="the first decisions")
        assert proc.poll() is None, (tmp_path / "pipeline.log").read_text()[-3000:]
        feeder = threading.Thread(target=feed, args=(600, 300))  # more, while it runs
        feeder.start()
        wait_until(lambda: decided() > 450 or proc.poll() is not None, timeout=240, what="decisions of the second lot")
        # Every few seconds a line per query, and how long after sending the latest decision came.
        printed = lambda: (tmp_path / "pipeline.log").read_text()  # noqa: E731
        wait_until(lambda: re.search(r"payments-decide: \d+ micro-batches, the last [\d,]+ records", printed()) and
                 re.search(r"latest decision: \d+ ms after it was sent", printed()) or proc.poll() is not None,
                 timeout=60, what="progress lines")
        assert proc.poll() is None, printed()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its Python workers, as data comes in
        proc.wait()
    feeder.join()
    feed(200)
    # Started again from its checkpoints (here, in this test's warm Spark, to the end of its input).
    cfg = PipelineConfig(bootstrap_servers=bs, state_dir=state, available_now=True)
    payments.run(spark, cfg)

    result = check_one_decision_each(bs, feed.sent)
    check_archive(spark, cfg, result)
