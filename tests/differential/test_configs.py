"""DescribeConfigs (defaults, sources, synonyms, types) for every topic key and the broker keys
Samsa knows; AlterConfigs and IncrementalAlterConfigs validation, as Kafka answers them."""

from __future__ import annotations

import pytest

from harness import create_topic
from waiting import wait_until

TOPIC, BROKER = 2, 4

TOPIC_KEYS = [
    "cleanup.policy", "compression.gzip.level", "compression.lz4.level", "compression.type",
    "compression.zstd.level", "delete.retention.ms", "file.delete.delay.ms", "flush.messages", "flush.ms",
    "follower.replication.throttled.replicas", "index.interval.bytes", "leader.replication.throttled.replicas",
    "local.retention.bytes", "local.retention.ms", "max.compaction.lag.ms", "max.message.bytes",
    "message.timestamp.after.max.ms", "message.timestamp.before.max.ms", "message.timestamp.type",
    "min.cleanable.dirty.ratio", "min.compaction.lag.ms", "min.insync.replicas", "preallocate",
    "remote.log.copy.disable", "remote.log.delete.on.disable", "remote.storage.enable", "retention.bytes",
    "retention.ms", "segment.bytes", "segment.index.bytes", "segment.jitter.ms", "segment.ms",
    "unclean.leader.election.enable",
]

# Broker keys both brokers leave at their defaults (or set alike: num.partitions, the rebalance delay).
BROKER_KEYS = [
    "auto.create.topics.enable", "compression.type", "default.replication.factor", "delete.topic.enable",
    "fetch.max.bytes", "group.initial.rebalance.delay.ms", "group.max.session.timeout.ms",
    "group.min.session.timeout.ms", "log.cleaner.enable", "log.cleanup.policy", "log.index.interval.bytes",
    "log.message.timestamp.type", "log.retention.bytes", "log.retention.hours", "log.retention.ms",
    "log.roll.hours", "log.segment.bytes", "message.max.bytes", "min.insync.replicas", "num.partitions",
    "offsets.retention.minutes", "replica.fetch.max.bytes", "socket.request.max.bytes",
    "transaction.max.timeout.ms", "unclean.leader.election.enable", "log.segment.delete.delay.ms",
    "max.connections.per.ip", "num.io.threads", "queued.max.requests", "log.flush.interval.messages",
    "max.incremental.fetch.session.cache.slots", "replica.selector.class", "broker.rack",
]


def _describe(side, rtype: int, name: str, keys: list[str] | None, synonyms: bool = True) -> list:
    r = side.call(32, {"resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
                       "include_synonyms": synonyms, "include_documentation": False}, 4)
    out = []
    for res in r["results"]:
        out.append({"error_code": res["error_code"], "error_message": res["error_message"],
                    "configs": sorted(({k: v for k, v in c.items() if k != "documentation"} for c in res["configs"]),
                                      key=lambda c: c["name"])})
    return out


@pytest.fixture(scope="module")
def described_topic(sides):
    name = "diff-configs"
    for s in sides:
        create_topic(s, name, 1, {"retention.ms": "3600000", "cleanup.policy": "compact,delete"})
    return name


@pytest.mark.parametrize("key", TOPIC_KEYS)
def test_topic_config_default(diff, described_topic, key):
    diff(lambda s: _describe(s, TOPIC, described_topic, [key]))


def test_topic_config_keys_all(diff, described_topic):
    """Describing all keys of a topic lists the same names."""
    diff(lambda s: sorted(c["name"] for c in _describe(s, TOPIC, described_topic, None, False)[0]["configs"]))


@pytest.mark.parametrize("key", BROKER_KEYS)
def test_broker_config_default(diff, key):
    diff(lambda s: _describe(s, BROKER, "1", [key]))


def test_describe_configs_unknown_topic(diff):
    diff(lambda s: _describe(s, TOPIC, "no-such-topic-dc", None))


def test_describe_configs_unknown_broker(diff):
    diff(lambda s: _describe(s, BROKER, "77", None))


def test_describe_configs_bad_broker_name(diff):
    diff(lambda s: _describe(s, BROKER, "not-a-number", None))


def test_describe_configs_unknown_key(diff, described_topic):
    diff(lambda s: _describe(s, TOPIC, described_topic, ["no.such.key"]))


def _incremental(side, topic: str, ops: list[tuple[str, int, str | None]], validate_only: bool = True,
                 rtype: int = TOPIC) -> list:
    r = side.call(44, {"resources": [{"resource_type": rtype, "resource_name": topic,
                                      "configs": [{"name": k, "config_operation": op, "value": v}
                                                  for k, op, v in ops]}],
                       "validate_only": validate_only}, 1)
    return [{k: v for k, v in res.items()} for res in r["responses"]]


SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

BAD_VALUES = [
    ("retention.ms", "abc"), ("retention.ms", "-5"), ("cleanup.policy", "shred"), ("min.insync.replicas", "0"),
    ("max.message.bytes", "-1"), ("segment.bytes", "10"), ("compression.type", "brotli"),
    ("message.timestamp.type", "WallClock"), ("min.cleanable.dirty.ratio", "1.5"), ("preallocate", "maybe"),
    ("no.such.topic.key", "1"), ("segment.ms", "0"), ("compression.gzip.level", "42"),
]


@pytest.mark.parametrize("key,value", BAD_VALUES, ids=[f"{k}={v}" for k, v in BAD_VALUES])
def test_incremental_alter_invalid_value(diff, described_topic, key, value):
    diff(lambda s: _incremental(s, described_topic, [(key, SET, value)]))


@pytest.mark.parametrize("key,value", BAD_VALUES[:6], ids=[f"{k}={v}" for k, v in BAD_VALUES[:6]])
def test_alter_configs_invalid_value(diff, described_topic, key, value):
    def run(s):
        r = s.call(33, {"resources": [{"resource_type": TOPIC, "resource_name": described_topic,
                                       "configs": [{"name": key, "value": value}]}], "validate_only": True}, 2)
        return r["responses"]
    diff(run)


def test_incremental_alter_unknown_topic(diff):
    diff(lambda s: _incremental(s, "no-such-topic-iac", [("retention.ms", SET, "1000")]))


def test_incremental_alter_append_to_non_list(diff, described_topic):
    diff(lambda s: _incremental(s, described_topic, [("retention.ms", APPEND, "1000")]))


def test_incremental_alter_subtract_cleanup_policy(diff, described_topic):
    diff(lambda s: _incremental(s, described_topic, [("cleanup.policy", SUBTRACT, "compact")]))


def test_incremental_alter_duplicate_key(diff, described_topic):
    diff(lambda s: _incremental(s, described_topic, [("retention.ms", SET, "1000"), ("retention.ms", DELETE, None)]))


def test_incremental_alter_bad_operation(diff, described_topic):
    diff(lambda s: _incremental(s, described_topic, [("retention.ms", 9, "1000")]))


def _applied(side, topic: str, key: str, done) -> None:
    """Until the topic's ``key`` as described satisfies ``done``: Kafka applies an accepted
    alteration through its metadata log, so a describe right after it may still show the old one."""
    wait_until(lambda: done(_describe(side, TOPIC, topic, [key], synonyms=False)[0]["configs"][0]),
               f"{key} of {topic} altered on {side.name}", 30)


def test_incremental_alter_set_then_describe(diff, sides):
    def run(s):
        create_topic(s, "diff-iac-set")
        a = _incremental(s, "diff-iac-set", [("retention.ms", SET, "1234567"), ("cleanup.policy", APPEND, "compact")],
                         validate_only=False)
        _applied(s, "diff-iac-set", "retention.ms", lambda c: c["value"] == "1234567")
        return a, _describe(s, TOPIC, "diff-iac-set", ["retention.ms", "cleanup.policy", "retention.bytes"])
    diff(run)


def test_incremental_alter_delete_restores_default(diff, sides):
    def run(s):
        create_topic(s, "diff-iac-del", configs={"retention.ms": "5000"})
        a = _incremental(s, "diff-iac-del", [("retention.ms", DELETE, None)], validate_only=False)
        _applied(s, "diff-iac-del", "retention.ms", lambda c: c["config_source"] != 1)  # no topic override left
        return a, _describe(s, TOPIC, "diff-iac-del", ["retention.ms"])
    diff(run)


def test_incremental_alter_broker_dynamic(diff):
    diff(lambda s: _incremental(s, "1", [("log.cleaner.threads", SET, "abc")], rtype=BROKER))


def test_incremental_alter_broker_read_only(diff):
    diff(lambda s: _incremental(s, "1", [("broker.id", SET, "5")], rtype=BROKER))
