"""CreateTopics (errors, validate-only), DeleteTopics, CreatePartitions, Metadata, as Kafka answers them."""

from __future__ import annotations

import pytest

from harness import create_topic, topic_result


def _create(side, name: str, partitions: int = 1, rf: int = 1, configs: dict | None = None,
            validate_only: bool = True, assignments: list | None = None, version: int = 5) -> list:
    r = side.call(19, {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": rf,
                                   "assignments": assignments or [],
                                   "configs": [{"name": k, "value": v} for k, v in (configs or {}).items()]}],
                       "timeout_ms": 30000, "validate_only": validate_only}, version)
    out = topic_result(r)
    if version >= 5:
        for o, t in zip(out, r["topics"]):
            o.update(num_partitions=t["num_partitions"], replication_factor=t["replication_factor"],
                     configs=sorted((c["name"], c["value"], c["read_only"], c["config_source"], c["is_sensitive"])
                                    for c in (t["configs"] or [])))
    return out


BAD_NAMES = [".", "..", "a" * 250, "bad/name", "with space", "", "ünïcode", "tab\tname", "x" * 249 + "!"]


@pytest.mark.parametrize("name", BAD_NAMES, ids=["dot", "dotdot", "toolong", "slash", "space", "empty",
                                                  "unicode", "tab", "bang"])
def test_create_invalid_name(diff, name):
    diff(lambda s: _create(s, name))


@pytest.mark.parametrize("partitions", [0, -2, -1])
def test_create_partition_count(diff, partitions):
    diff(lambda s: _create(s, "diff-parts", partitions=partitions))


@pytest.mark.parametrize("rf", [0, 2, -2, -1])
def test_create_replication_factor(diff, rf):
    diff(lambda s: _create(s, "diff-rf", rf=rf))


@pytest.mark.parametrize("configs", [{"retention.ms": "x"}, {"cleanup.policy": "shred"}, {"unknown.key": "1"},
                                     {"min.insync.replicas": "2"}, {"max.message.bytes": "-5"},
                                     {"retention.ms": "60000", "segment.bytes": "1048576"},
                                     {"compression.type": "zstd", "compression.zstd.level": "99"}],
                         ids=["retention-x", "policy", "unknown", "min-isr-2", "max-message-neg", "valid",
                              "zstd-level"])
def test_create_validate_only_configs(diff, configs):
    diff(lambda s: _create(s, "diff-vo-configs", configs=configs))


def test_create_validate_only_defaults(diff):
    diff(lambda s: _create(s, "diff-vo", partitions=3))


def test_create_validate_only_v4(diff):
    diff(lambda s: _create(s, "diff-vo4", partitions=2, version=4))


def test_create_assignments_and_count(diff):
    diff(lambda s: _create(s, "diff-assign", partitions=2, rf=-1,
                           assignments=[{"partition_index": 0, "broker_ids": [1]}]))


def test_create_assignment_unknown_broker(diff):
    diff(lambda s: _create(s, "diff-assign2", partitions=-1, rf=-1,
                           assignments=[{"partition_index": 0, "broker_ids": [9]}]))


def test_create_assignment_gap(diff):
    diff(lambda s: _create(s, "diff-assign3", partitions=-1, rf=-1,
                           assignments=[{"partition_index": 1, "broker_ids": [1]}]))


def test_create_existing(diff):
    def run(s):
        create_topic(s, "diff-exists")
        return _create(s, "diff-exists", validate_only=False)
    diff(run)


def test_create_duplicate_in_request(diff):
    def run(s):
        r = s.call(19, {"topics": [{"name": "diff-dup", "num_partitions": 1, "replication_factor": 1,
                                    "assignments": [], "configs": []}] * 2, "timeout_ms": 5000,
                        "validate_only": True}, 5)
        return topic_result(r)
    diff(run)


def test_create_then_describe_metadata(diff):
    def run(s):
        create_topic(s, "diff-meta", 3)
        r = s.call(3, {"topics": [{"name": "diff-meta"}], "allow_auto_topic_creation": False,
                       "include_topic_authorized_operations": False}, 9)
        t = r["topics"][0]
        return t["error_code"], t["is_internal"], [(p["partition_index"], p["error_code"], p["replica_nodes"],
                                                    p["isr_nodes"], p["offline_replicas"], p["leader_epoch"])
                                                   for p in t["partitions"]]
    diff(run)


def test_metadata_unknown_topic_no_autocreate(diff):
    diff(lambda s: [(t["name"], t["error_code"]) for t in s.call(3, {"topics": [{"name": "diff-nope"}],
                                                                     "allow_auto_topic_creation": False}, 9)["topics"]])


def test_metadata_invalid_topic_name(diff):
    diff(lambda s: [(t["name"], t["error_code"]) for t in s.call(3, {"topics": [{"name": "bad/name"}],
                                                                     "allow_auto_topic_creation": True}, 9)["topics"]])


def test_metadata_brokers(diff):
    diff(lambda s: [(b["node_id"], b["rack"]) for b in s.call(3, {"topics": []}, 9)["brokers"]])


def test_metadata_auto_create(diff):
    def run(s):
        r = s.call(3, {"topics": [{"name": "diff-auto"}], "allow_auto_topic_creation": True}, 9)
        return [(t["name"], t["error_code"] in (0, 5)) for t in r["topics"]]
    diff(run)


def test_delete_unknown_topic(diff):
    diff(lambda s: [(r["name"], r["error_code"], r["error_message"])
                    for r in s.call(20, {"topic_names": ["diff-none"], "timeout_ms": 5000}, 5)["responses"]])


def test_delete_topic_then_metadata(diff):
    def run(s):
        create_topic(s, "diff-del")
        d = s.call(20, {"topic_names": ["diff-del"], "timeout_ms": 30000}, 5)["responses"]
        return [(r["name"], r["error_code"]) for r in d]
    diff(run)


def test_delete_internal_topic(diff):
    def run(s):
        # the offsets topic exists once a group coordinator was looked up
        s.call(10, {"key": "diff-g-internal", "key_type": 0}, 2)
        d = s.call(20, {"topic_names": ["__consumer_offsets"], "timeout_ms": 5000}, 5)["responses"]
        return [(r["name"], r["error_code"]) for r in d]
    diff(run)


def _partitions(s, topic: str, count: int, validate_only: bool = True, assignments=None) -> list:
    r = s.call(37, {"topics": [{"name": topic, "count": count, "assignments": assignments}],
                    "timeout_ms": 30000, "validate_only": validate_only}, 3)
    return [(x["name"], x["error_code"], x["error_message"]) for x in r["results"]]


@pytest.mark.parametrize("count", [1, 0, 2, 5])
def test_create_partitions_counts(diff, sides, count):
    def run(s):
        create_topic(s, "diff-cp", 2)
        return _partitions(s, "diff-cp", count)
    diff(run)


def test_create_partitions_unknown_topic(diff):
    diff(lambda s: _partitions(s, "diff-cp-none", 3))


def test_create_partitions_bad_assignment(diff):
    def run(s):
        create_topic(s, "diff-cp2", 1)
        return _partitions(s, "diff-cp2", 3, assignments=[{"broker_ids": [1]}])
    diff(run)


@pytest.mark.parametrize("timeout_ms", [0, -1])
def test_timeout_not_positive(diff, timeout_ms):
    """Issue 33: a deadline already past. Kafka's controller answers every topic REQUEST_TIMED_OUT
    (no message) and does nothing, even for a topic that does not exist."""
    def scenario(s):
        create_topic(s, "diff-tmo-kept")
        out = [topic_result(s.call(19, {"topics": [{"name": "diff-tmo-new", "num_partitions": 2, "replication_factor": 1,
                                                    "assignments": [], "configs": []}],
                                        "timeout_ms": timeout_ms, "validate_only": False}, 5))]
        r = s.call(37, {"topics": [{"name": "diff-tmo-kept", "count": 3, "assignments": None},
                                   {"name": "diff-tmo-none", "count": 3, "assignments": None}],
                        "timeout_ms": timeout_ms, "validate_only": False}, 3)
        out.append([(t["name"], t["error_code"], t["error_message"]) for t in r["results"]])
        r = s.call(20, {"topic_names": ["diff-tmo-kept", "diff-tmo-none"], "timeout_ms": timeout_ms}, 4)
        out.append([(t["name"], t["error_code"]) for t in r["responses"]])
        r = s.call(3, {"topics": [{"name": n, "topic_id": bytes(16)} for n in ("diff-tmo-kept", "diff-tmo-new")],
                       "allow_auto_topic_creation": False, "include_topic_authorized_operations": False}, 12)
        out.append([(t["name"], t["error_code"], len(t["partitions"])) for t in r["topics"]])
        return out
    diff(scenario)
