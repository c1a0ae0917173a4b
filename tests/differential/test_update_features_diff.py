"""UpdateFeatures (API 57) and the features in ApiVersions, against Apache Kafka 4.4.0 and Samsa.

The refusals (INVALID_UPDATE_VERSION with Kafka's messages, v0-v2) change nothing; the accepted
updates are sent ``validate_only`` (v1+) or change nothing (the level finalized already), so both
session brokers keep their features for the other scenarios."""

from __future__ import annotations

import pytest

UPGRADE, SAFE, UNSAFE = 1, 2, 3


def _update(side, updates, version, validate_only=False) -> dict:
    return side.fresh_call(57, {"timeout_ms": 30000, "validate_only": validate_only, "feature_updates": [
        {"feature": f, "max_version_level": level, "upgrade_type": kind, "allow_downgrade": False}
        for f, level, kind in updates]}, version)


CASES = {
    "too-high": [("transaction.version", 3, UPGRADE)],
    "unknown": [("foo.bar", 1, UPGRADE)],
    "unknown-disable": [("foo.bar", 0, SAFE)],
    "downgrade-as-upgrade": [("transaction.version", 1, UPGRADE)],
    "disable-as-upgrade": [("transaction.version", 0, UPGRADE)],
    "no-such-upgrade-type": [("transaction.version", 1, 7)],
    "negative": [("transaction.version", -1, SAFE)],
    "metadata-downgrade": [("metadata.version", 21, SAFE)],
    "metadata-unsafe-downgrade": [("metadata.version", 30, UNSAFE)],
    "metadata-disable": [("metadata.version", 0, SAFE)],
    "metadata-too-high": [("metadata.version", 34, UPGRADE)],
    "one-bad-of-two": [("transaction.version", 2, UPGRADE), ("group.version", 5, UPGRADE)],
    "two-bad": [("transaction.version", 7, UPGRADE), ("foo.bar", 1, UPGRADE)],
    "no-change": [("transaction.version", 2, UPGRADE), ("metadata.version", 33, UPGRADE)],
    "empty": [],
}


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("case", list(CASES))
def test_update_features_refusals(diff, case, version):
    diff(lambda side: _update(side, CASES[case], version))


VALIDATED = {
    "downgrade": [("transaction.version", 1, SAFE)],
    "unsafe-disable": [("transaction.version", 0, UNSAFE)],
    "downgrade-to-newer": [("group.version", 1, SAFE), ("transaction.version", 2, SAFE)],
    "last-of-a-feature-wins": [("transaction.version", 3, UPGRADE), ("transaction.version", 1, SAFE)],
}


@pytest.mark.parametrize("case", list(VALIDATED))
def test_update_features_validate_only(diff, case):
    diff(lambda side: [_update(side, VALIDATED[case], v, validate_only=True) for v in (1, 2)])


def test_api_versions_features(diff):
    """Supported and finalized levels of the features both have (share.version: its own scenario,
    allow-listed), at ApiVersions v4 and v3 (v3 leaves out features whose minimum is 0)."""
    common = {"transaction.version", "group.version", "streams.version", "metadata.version"}

    def run(side):
        out = []
        for v in (3, 4):
            r = side.call(18, {"client_software_name": "diff", "client_software_version": "1"}, v)
            out.append((sorted((f["name"], f["min_version"], f["max_version"]) for f in r["supported_features"]
                               if f["name"] in common),
                        sorted((f["name"], f["min_version_level"], f["max_version_level"])
                               for f in r["finalized_features"] if f["name"] in common),
                        r["finalized_features_epoch"] >= 0))
        return out
    diff(run)


def _heartbeats(side) -> dict:
    """A first heartbeat of each modern group protocol (ConsumerGroupHeartbeat, ShareGroupHeartbeat,
    StreamsGroupHeartbeat), error and message only."""
    import uuid

    from streams_wire import topology
    consumer = side.fresh_call(68, {
        "group_id": "diff-feat-cg", "member_id": str(uuid.uuid4()), "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 30000, "subscribed_topic_names": ["diff-feat-t"],
        "subscribed_topic_regex": None, "server_assignor": None, "topic_partitions": []}, 1)
    share = side.fresh_call(76, {"group_id": "diff-feat-sg", "member_id": str(uuid.uuid4()), "member_epoch": 0,
                                 "rack_id": None, "subscribed_topic_names": ["diff-feat-t"]}, 1)
    streams = side.fresh_call(88, {
        "group_id": "diff-feat-st", "member_id": str(uuid.uuid4()), "member_epoch": 0,
        "endpoint_information_epoch": 0, "instance_id": None, "rack_id": None, "rebalance_timeout_ms": 30000,
        "topology": topology("diff-feat-t", "diff-feat-st"), "process_id": "p", "user_endpoint": None,
        "client_tags": [], "task_offsets": [], "task_end_offsets": [], "shutdown_application": False,
        "active_tasks": [], "standby_tasks": [], "warmup_tasks": []}, 0)
    return {name: (r["error_code"], r["error_message"], r.get("member_id") if r["error_code"] == 35 else "-")
            for name, r in (("consumer", consumer), ("share", share), ("streams", streams))}


def test_group_protocols_off_at_level_0(diff):
    """``group.version``, ``share.version`` and ``streams.version`` disabled: each protocol's
    heartbeat is answered UNSUPPORTED_VERSION; the levels are restored after."""
    features = ("group.version", "share.version", "streams.version")

    def run(side):
        r = side.call(18, {"client_software_name": "diff", "client_software_version": "1"}, 4)
        before = {f["name"]: f["max_version_level"] for f in r["finalized_features"]}
        down = _update(side, [(f, 0, SAFE) for f in features], 2)
        try:
            off = _heartbeats(side)
        finally:
            up = _update(side, [(f, before[f], UPGRADE) for f in features], 2)
        return down["error_code"], off, up["error_code"]
    diff(run)
