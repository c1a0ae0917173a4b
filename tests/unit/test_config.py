"""server.properties parsing: Kafka's keys, defaults, derived values and clear errors."""

import logging

import pytest

from samsa.broker_config import BrokerConfig, ConfigError, parse_properties, parse_topic_config

SEED_EXAMPLE = """
# from the seeds' production example
broker.id=0
listeners=PLAINTEXT://10.53.32.126:9092
advertised.listeners=PLAINTEXT://10.53.32.126:9092
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/srv/data/kafka-data
num.partitions=3
num.recovery.threads.per.data.dir=3
offsets.topic.replication.factor=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=3
log.retention.hours=4
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connection.timeout.ms=6000
zookeeper.connect=10.53.32.126:2181,10.53.32.153:2181,10.53.32.134:2181
group.initial.rebalance.delay.ms=0
default.replication.factor=2
"""


def test_every_key_of_the_seed_example_is_known(caplog):
    with caplog.at_level(logging.WARNING):
        c = BrokerConfig(parse_properties(SEED_EXAMPLE))
    assert "isn't a known config" not in caplog.text
    assert c["num.partitions"] == 3
    assert c.log_dirs == ["/srv/data/kafka-data"]
    assert c.retention_ms == 4 * 3_600_000
    assert c["zookeeper.connection.timeout.ms"] == 6000
    assert c.listeners == ["PLAINTEXT://10.53.32.126:9092"]


def test_kafka_defaults():
    c = BrokerConfig({})
    assert c.log_dirs == ["/tmp/kafka-logs"]
    assert c["num.partitions"] == 1
    assert c["default.replication.factor"] == 1
    assert c["auto.create.topics.enable"] is True
    assert c["delete.topic.enable"] is True
    assert c["log.segment.bytes"] == 1073741824
    assert c.retention_ms == 168 * 3_600_000
    assert c["log.retention.bytes"] == -1
    assert c["socket.request.max.bytes"] == 104857600
    assert c["min.insync.replicas"] == 1
    assert c["offsets.topic.num.partitions"] == 50
    assert c.listeners == ["PLAINTEXT://:9092"]


def test_smallest_retention_unit_wins():
    assert BrokerConfig({"log.retention.hours": "1", "log.retention.minutes": "5"}).retention_ms == 300_000
    assert BrokerConfig({"log.retention.minutes": "5", "log.retention.ms": "1234"}).retention_ms == 1234


def test_roll_hours_and_ms():
    assert BrokerConfig({"log.roll.hours": "2"}).roll_ms == 7_200_000
    assert BrokerConfig({"log.roll.hours": "2", "log.roll.ms": "10"}).roll_ms == 10


def test_log_dir_and_log_dirs():
    assert BrokerConfig({"log.dir": "/a"}).log_dirs == ["/a"]
    assert BrokerConfig({"log.dir": "/a", "log.dirs": "/b,/c"}).log_dirs == ["/b", "/c"]


def test_legacy_port():
    assert BrokerConfig({"port": "9093"}).listeners == ["PLAINTEXT://:9093"]


def test_unknown_key_is_warned_about(caplog):
    with caplog.at_level(logging.WARNING):
        c = BrokerConfig({"no.such.key": "1"})
    assert "no.such.key" in caplog.text
    assert c.unknown == {"no.such.key": "1"}


@pytest.mark.parametrize("key,value,fragment", [
    ("num.partitions", "abc", "Not a number of type INT"),
    ("num.partitions", "0", "at least 1"),
    ("auto.create.topics.enable", "yes", "either true or false"),
    ("listeners", "localhost:9092", "PLAINTEXT://host:port"),
    ("log.message.timestamp.type", "Sometime", "CreateTime"),
    ("log.segment.bytes", "3000000000", "INT"),
])
def test_bad_values_are_clear_errors(key, value, fragment):
    with pytest.raises(ConfigError) as e:
        BrokerConfig({key: value})
    assert key in str(e.value) and fragment in str(e.value)


def test_properties_syntax():
    props = parse_properties("a=1\n  # comment\n! also\nb : two words\nc\\\n  ontinued=3\nd 4\n")
    assert props == {"a": "1", "b": "two words", "continued": "3", "d": "4"}


def test_from_file_with_overrides(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("broker.id=3\nnum.partitions=2\n")
    c = BrokerConfig.from_file(f, {"num.partitions": "5"})
    assert c.broker_id == 3 and c["num.partitions"] == 5


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        BrokerConfig.from_file(tmp_path / "nope.properties")


def test_topic_configs():
    assert parse_topic_config("retention.ms", "1000") == 1000
    assert parse_topic_config("cleanup.policy", "compact,delete") == ["compact", "delete"]
    with pytest.raises(ConfigError):
        parse_topic_config("retention.ms", "soon")
    with pytest.raises(ConfigError, match="Unknown topic config"):
        parse_topic_config("retention.fortnights", "1")


def test_topic_defaults_follow_broker_synonyms():
    c = BrokerConfig({"log.retention.minutes": "10", "message.max.bytes": "2000", "log.cleanup.policy": "compact"})
    assert c.topic_default("retention.ms") == 600_000
    assert c.topic_default("max.message.bytes") == 2000
    assert c.topic_default("cleanup.policy") == ["compact"]


def test_listeners_and_their_protocols():
    c = BrokerConfig({"listeners": "PLAINTEXT://:9092,SSL://:9093,SASL_SSL://:9094"})
    assert [c.security_protocol(n) for n in ("PLAINTEXT", "SSL", "SASL_SSL")] == ["PLAINTEXT", "SSL", "SASL_SSL"]
    assert c.inter_broker_listener == "PLAINTEXT"
    with pytest.raises(ConfigError, match="unknown security protocol"):
        BrokerConfig({"listeners": "X://:9093", "listener.security.protocol.map": "X:TLS"})
    with pytest.raises(ConfigError, match="inter.broker.listener.name"):
        BrokerConfig({"listeners": "SSL://:9093", "inter.broker.listener.name": "INTERNAL"})
    c = BrokerConfig({"listeners": "EXTERNAL://:9093,INTERNAL://:9094", "inter.broker.listener.name": "INTERNAL",
                      "listener.security.protocol.map": "EXTERNAL:SASL_SSL,INTERNAL:SSL",
                      "listener.name.internal.ssl.client.auth": "required"})
    assert c.inter_broker_listener == "INTERNAL"
    assert c.listener_value("INTERNAL", "ssl.client.auth") == "required"
    assert c.listener_value("EXTERNAL", "ssl.client.auth") == "none"
    assert c.listener_overrides == {"listener.name.internal.ssl.client.auth": "required"} and not c.unknown
    with pytest.raises(ConfigError, match="No security protocol"):
        BrokerConfig({"listeners": "INTERNAL://:9093"})
    c = BrokerConfig({"listeners": "INTERNAL://:9093", "listener.security.protocol.map": "INTERNAL:PLAINTEXT"})
    assert c.listeners == ["INTERNAL://:9093"]


def test_failed_authentication_delay_is_below_the_idle_timeout():
    assert BrokerConfig({})["connection.failed.authentication.delay.ms"] == 100
    with pytest.raises(ConfigError, match="should always be less than connections.max.idle.ms"):
        BrokerConfig({"connection.failed.authentication.delay.ms": "600000"})


@pytest.mark.parametrize("name,raw,message", [
    ("segment.bytes", "1048575", "Value must be at least 1048576"),
    ("min.cleanable.dirty.ratio", "1.5", "Value must be no more than 1"),
    ("min.cleanable.dirty.ratio", "-0.5", "Value must be at least 0"),
    ("compression.gzip.level", "42", "Value must be between 1 and 9 or equal to -1"),
    ("compression.zstd.level", "-200000", "Value must be at least -131072"),
    ("compression.lz4.level", "18", "Value must be no more than 17"),
])
def test_topic_config_ranges_as_kafka_4(name, raw, message):
    with pytest.raises(ConfigError, match=f"Invalid value {raw} for configuration {name}: {message}"):
        parse_topic_config(name, raw)


def test_small_segments_by_the_internal_key_and_stored_values_kept():
    from samsa.broker_config import stored_topic_config
    assert parse_topic_config("internal.segment.bytes", "300") == 300  # Kafka 4's key for tests
    assert parse_topic_config("compression.gzip.level", "-1") == -1
    # an override an older Samsa stored below today's minimum still loads
    assert stored_topic_config("segment.bytes", "300") == 300
