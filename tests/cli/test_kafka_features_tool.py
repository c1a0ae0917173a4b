"""Apache Kafka 4.4.0's ``kafka-features`` (its Admin: ApiVersions and UpdateFeatures) against a
Samsa broker: describe, the refusals as Kafka prints them, a dry run, a downgrade of
``transaction.version`` that holds across a restart and makes a transactional producer use
transactions version 1, upgrade and disable; and a KRaft node reporting the features
``samsa storage format`` finalized.

The expected lines are those Kafka 4.4.0's tool printed against Kafka 4.4.0 itself (the same
commands; tests/differential compares the UpdateFeatures answers behind them)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor

from broker_process import ROOT, BrokerProcess
from kafka_tools import finalized_features, kafka_tool, kafka_tools
from samsa import Admin, Producer

WAIT = 30
TOO_HIGH = ("Could not upgrade transaction.version to 3. The update failed for all features since the following "
            "feature had an error: Invalid update version 3 for feature transaction.version. Local controller 1 "
            "only supports versions 0-2")
UNKNOWN = ("Could not upgrade foo.bar to 1. The update failed for all features since the following feature had an "
           "error: Invalid update version 1 for feature foo.bar. Local controller 1 does not support this feature.")
AS_UPGRADE = ("Could not upgrade transaction.version to 1. The update failed for all features since the following "
              "feature had an error: Invalid update version 1 for feature transaction.version. Can't downgrade the "
              "version of this feature without setting the upgrade type to either safe or unsafe downgrade.")
METADATA_DOWN = ("Could not downgrade metadata.version to 21. The update failed for all features since the following "
                 "feature had an error: Unsupported metadata.version downgrade from 33 to 21. Refusing to perform the "
                 "requested downgrade because it might delete metadata information.")


def features_tool(bootstrap: str, *args: str) -> tuple[int, list[str]]:
    return kafka_tool("kafka-features", bootstrap, *args)


def described(lines: list[str]) -> dict[str, tuple[str, str, str]]:
    """``describe``'s lines: feature -> (supported min, supported max, finalized level)."""
    out = {}
    for line in lines:
        f = line.split()
        out[f[1]] = (f[3], f[5], f[7])
        assert f[8] == "Epoch:", line
    return out


def commit_one(bootstrap: str, topic: str, txn_id: str | None = None) -> int:
    """One committed transaction of a Samsa producer: the producer epoch its coordinator holds
    after it (transactions version 2 bumps it at every commit; version 1 does not)."""
    txn_id = txn_id or f"feat-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": txn_id})
    try:
        p.init_transactions(WAIT)
        p.begin_transaction()
        p.send(topic, b"v")
        p.commit_transaction(WAIT)
    finally:
        p.close()
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return admin.describe_transactions([txn_id])[txn_id].producer_epoch


def transaction_log(data_dir, txn_id: str) -> list:
    """The values written for ``txn_id`` in the broker's ``__transaction_state`` segments."""
    from samsa.protocol.txn_records import parse_txn_key, parse_txn_value
    from samsa.storage.kraft import iter_batches
    out = []
    for seg in sorted(data_dir.rglob("__transaction_state-*/*.log")):
        for header, records in iter_batches(seg.read_bytes()):
            out += [parse_txn_value(bytes(r.value)) for r in records
                    if not header.is_control and r.value is not None and parse_txn_key(bytes(r.key)) == txn_id]
    return out


def test_kafka_features_against_a_samsa_broker(tmp_path):
    kafka_tools()
    broker = BrokerProcess(tmp_path / "b", **{"broker.id": "1"}).start()
    try:
        bs = broker.bootstrap
        with ThreadPoolExecutor(4) as pool:  # one JVM each, at once
            runs = list(pool.map(lambda args: features_tool(bs, *args), [
                ("describe",), ("upgrade", "--feature", "transaction.version=3"),
                ("upgrade", "--feature", "foo.bar=1"), ("upgrade", "--feature", "transaction.version=1"),
                ("downgrade", "--metadata", "3.9"),
                ("downgrade", "--feature", "transaction.version=1", "--dry-run")]))
        (rc, lines), *refusals, dry = runs
        assert rc == 0 and described(lines) == {
            "group.version": ("0", "1", "1"), "metadata.version": ("3.3-IV3", "4.4-IV2", "4.4-IV2"),
            "share.version": ("0", "1", "1"), "streams.version": ("0", "1", "1"),
            "transaction.version": ("0", "2", "2")}, lines
        for (rc, lines), expected in zip(refusals, [TOO_HIGH, UNKNOWN, AS_UPGRADE, METADATA_DOWN]):
            assert (rc, lines) == (1, [expected, "1 out of 1 operation(s) failed."])
        assert dry == (0, ["transaction.version can be downgraded to 1."])
        levels, epoch = finalized_features(bs)
        assert levels["transaction.version"] == 2  # the dry run changed nothing
        assert commit_one(bs, "feat-t") == 1  # transactions version 2: the commit bumped the epoch

        assert features_tool(bs, "downgrade", "--feature", "transaction.version=1") == (
            0, ["transaction.version was downgraded to 1."])
        assert finalized_features(bs) == ({**levels, "transaction.version": 1}, epoch + 1)
        broker.stop()
        broker.start()  # held at 1 across a restart: the levels live in the metadata store
        assert finalized_features(bs) == ({**levels, "transaction.version": 1}, epoch + 1)
        assert commit_one(bs, "feat-t") == 0  # the producer runs transactions version 1: no bump

        assert features_tool(bs, "upgrade", "--feature", "transaction.version=2") == (
            0, ["transaction.version was upgraded to 2."])
        assert commit_one(bs, "feat-t") == 1
        assert features_tool(bs, "disable", "--feature", "transaction.version") == (
            0, ["transaction.version was disabled."])
        levels, _ = finalized_features(bs)
        assert "transaction.version" not in levels  # level 0: not finalized, as Kafka leaves it out
        assert commit_one(bs, "feat-t", "feat-tv0") == 0
        # __transaction_state values of version 0 at level 0 (Kafka 4: version 1 from level 1)
        assert {v.version for v in transaction_log(tmp_path / "b", "feat-tv0")} == {0}
    finally:
        broker.stop()


def test_a_kraft_node_reports_the_features_it_was_formatted_with(tmp_path):
    """``samsa storage format --release-version 4.0 --feature transaction.version=1``: ApiVersions
    reports metadata.version 4.0-IV3 and the levels of that release, transaction.version 1."""
    from test_storage_cli import CLUSTER_ID, kraft_props, write_props
    props = kraft_props(tmp_path)
    conf = write_props(tmp_path, props)
    r = subprocess.run([sys.executable, "-m", "samsa.cli.main", "storage", "format", "-t", CLUSTER_ID, "-c",
                        str(conf), "--release-version", "4.0", "--feature", "transaction.version=1"],
                       capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    port = int(props["listeners"].split(",")[0].rsplit(":", 1)[1])
    broker = BrokerProcess(tmp_path, port=port, **{"broker.id": props["node.id"]}, **props).start()
    try:
        levels, epoch = finalized_features(broker.bootstrap)
        assert levels == {"metadata.version": 25, "transaction.version": 1, "group.version": 1}, levels
        assert epoch == 0
    finally:
        broker.stop()
