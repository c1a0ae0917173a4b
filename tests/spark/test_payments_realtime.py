"""The payments pipeline in Spark's Real-Time Mode as a user runs it (``samsa pipeline run payments
--source kafka --real-time``, a process of its own, fed by this one): all three rules (amount,
velocity per card in Spark's state store, country) decide each transaction as it arrives, and
each decision reaches ``payment-decisions`` once (through the exactly-once relay), also when the
pipeline (with its child process of micro-batch queries) is SIGKILLed in the middle of a
Real-Time Mode batch and started again with the same command, so that Spark decides all of that
batch again; the velocity rule's rejections also come once each on ``payment-velocity-alerts``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from samsa.client.admin import Admin
from samsa.client.types import TopicPartition
from samsa.pipelines import payments
from samsa.pipelines.common import PipelineConfig, ensure_topics
from spark_helpers import read_committed
from test_payments_pipeline import PaymentsFeed, expected_decisions
from waiting import wait_until

BATCH_MS = 600_000  # no Real-Time Mode batch ends (and checkpoints) before the kill: Spark replays all of it


def once_each(bootstrap: str, topic: str) -> dict[str, tuple[str, list[str]]]:
    got: dict[str, tuple[str, list[str]]] = {}
    for m in read_committed(bootstrap, topic, partitions=2):
        d = json.loads(m.value())
        assert m.key() == d["tx_id"].encode()
        assert d["tx_id"] not in got, f"{d['tx_id']} written twice to {topic}"
        got[d["tx_id"]] = (d["decision"], d["reasons"])
    return got


def test_real_time_decisions_once_each_across_a_killed_pipeline(fresh_broker, tmp_path):
    bs = fresh_broker.bootstrap_servers
    state = tmp_path / "state"
    cmd = [sys.executable, "-m", "samsa.cli.main", "pipeline", "run", "payments", "--bootstrap-server", bs,
           "--state-dir", str(state), "--source", "kafka", "--real-time", "--real-time-batch-ms", str(BATCH_MS),
           "--background-trigger-ms", "1000"]
    feed = PaymentsFeed(bs, seed=8)
    printed = lambda: (tmp_path / "pipeline.log").read_text()  # noqa: E731

    def decided() -> int:
        with Admin({"bootstrap.servers": bs}) as admin:
            ends = admin.list_offsets({TopicPartition(payments.DECISIONS, p): "latest" for p in range(2)})
        return len(read_committed(bs, payments.DECISIONS, partitions=2)) if any(
            info.offset for info in ends.values()) else 0

    def pipeline() -> subprocess.Popen:  # its own session: the SIGKILL reaches its child process too
        return subprocess.Popen(cmd, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    ensure_topics(PipelineConfig(bootstrap_servers=bs), [payments.PAYMENTS, payments.DEAD_LETTERS, payments.DECISIONS])
    feed(300)
    log = open(tmp_path / "pipeline.log", "ab")
    proc = pipeline()
    feeder = threading.Thread(target=feed, args=(600, 200))  # more while it runs, decided as they come
    try:
        wait_until(lambda: decided() >= 300 or proc.poll() is not None, timeout=240, what="the first decisions")
        assert proc.poll() is None, printed()[-3000:]
        feeder.start()
        wait_until(lambda: decided() > 600 or proc.poll() is not None, timeout=120, what="decisions as they come")
        assert proc.poll() is None, printed()[-3000:]
        # Spark has checkpointed at most the warm-up batch (--real-time-warm-up-ms, 10 s; the next
        # ones last BATCH_MS): its restart decides again what came after it.
        commits = Path(state, "checkpoints", "payments-decide-realtime", "commits").glob("[0-9]*")
        assert {c.name for c in commits} <= {"0"}
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver, its JVM and its child process, as data comes in
        proc.wait()
    if feeder.ident is not None:  # started
        feeder.join()
    feed(200)
    proc = pipeline()  # the same command again: it resumes from its checkpoints
    try:
        wait_until(lambda: decided() >= len(feed.sent) or proc.poll() is not None, timeout=240,
                   what="every transaction decided after the restart")
        assert proc.poll() is None, printed()[-3000:]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(60)

    expected = expected_decisions(feed.sent)
    decided_now = once_each(bs, payments.DECISIONS)
    assert decided_now == expected  # every rule in the one decision: no velocity rejection approved first
    kinds = {r for _, reasons in decided_now.values() for r in reasons}
    assert kinds == {"amount_limit", "velocity", "country_mismatch"}  # the data exercises every rule
    # Spark decided the killed batch again (it had checkpointed none of it, above): the decisions
    # copied already were left out, by the query itself or by the relay
    alerts = once_each(bs, payments.VELOCITY_ALERTS)
    assert alerts == {tx: d for tx, d in expected.items() if "velocity" in d[1]}
