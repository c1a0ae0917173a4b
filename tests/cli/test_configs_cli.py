"""``samsa configs`` (kafka-configs.sh) run as a subprocess against an embedded broker."""

from __future__ import annotations

import subprocess

import pytest
from cli_tools import one_error_line, samsa

from samsa.cli.configs import UsageError, parse_add_config
from samsa.client.types import NewTopic







@pytest.fixture
def configs(broker):
    def run(*args: str) -> subprocess.CompletedProcess:
        return samsa("configs", "--bootstrap-server", broker.bootstrap_servers, *args)
    return run


@pytest.fixture
def topic(admin, request):
    name = "cfg-" + request.node.name.replace("[", "-").replace("]", "")
    admin.create_topics([NewTopic(name, 1, 1)])
    yield name
    admin.delete_topics([name])


def ok(r: subprocess.CompletedProcess) -> list[str]:
    assert (r.returncode, r.stderr) == (0, ""), r
    return r.stdout.splitlines()


def test_alter_describe_delete_topic_config(configs, topic, broker):
    assert ok(configs("--entity-type", "topics", "--entity-name", topic, "--alter",
                      "--add-config", "retention.ms=1000")) == [f"Completed updating config for topic {topic}."]
    lines = ok(configs("--entity-type", "topics", "--entity-name", topic, "--describe"))
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert len(lines) == 2
    assert lines[1].startswith("  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000")

    # The same through the shorthand flag, and as kafka-topics.sh shows it.
    assert ok(configs("--topic", topic, "--describe")) == lines
    head = samsa("topics", "--bootstrap-server", broker.bootstrap_servers, "--describe", "--topic", topic)
    assert head.stdout.splitlines()[0].endswith("\tConfigs: retention.ms=1000")

    assert ok(configs("--topic", topic, "--alter", "--delete-config", "retention.ms")) == [
        f"Completed updating config for topic {topic}."]
    assert ok(configs("--topic", topic, "--describe")) == [f"Dynamic configs for topic {topic} are:"]


def test_topic_config_synonyms_as_kafka_prints_them(configs, topic):
    ok(configs("--topic", topic, "--alter", "--add-config", "retention.ms=1000"))
    lines = ok(configs("--topic", topic, "--describe"))
    # Kafka 4.4 lists the default of retention.ms's first broker synonym only (log.retention.ms: none)
    assert lines[1] == "  retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000}"


def test_list_values_in_brackets_and_several_configs(configs, topic):
    ok(configs("--topic", topic, "--alter", "--add-config", "cleanup.policy=[compact,delete], segment.bytes = 1048576"))
    lines = ok(configs("--topic", topic, "--describe"))
    assert lines[1] == ("  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"
                        "cleanup.policy=compact,delete, DEFAULT_CONFIG:log.cleanup.policy=delete}")
    assert lines[2] == ("  segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, "
                        "DEFAULT_CONFIG:log.segment.bytes=1073741824}")
    # Deleting one leaves the other (IncrementalAlterConfigs, not a full replace).
    ok(configs("--topic", topic, "--alter", "--delete-config", "cleanup.policy"))
    assert [line.split("=")[0] for line in ok(configs("--topic", topic, "--describe"))[1:]] == ["  segment.bytes"]


def test_describe_all(configs, topic):
    lines = ok(configs("--topic", topic, "--describe", "--all"))
    assert lines[0] == f"All configs for topic {topic} are:"
    assert ("  segment.bytes=1073741824 sensitive=false synonyms={DEFAULT_CONFIG:log.segment.bytes=1073741824}"
            in lines)
    names = [line.split("=")[0].strip() for line in lines[1:]]
    assert names == sorted(names) and "retention.ms" in names and "cleanup.policy" in names


def test_bad_value_is_refused(configs, topic):
    line = one_error_line(configs("--topic", topic, "--alter", "--add-config", "retention.ms=abc"))
    assert "Invalid value abc for configuration retention.ms" in line
    assert ok(configs("--topic", topic, "--describe")) == [f"Dynamic configs for topic {topic} are:"]


def test_unknown_topic_config_is_refused(configs, topic):
    line = one_error_line(configs("--topic", topic, "--alter", "--add-config", "no.such.config=1"))
    assert "no.such.config" in line


def test_delete_config_not_set(configs, topic):
    assert one_error_line(configs("--topic", topic, "--alter", "--delete-config", "retention.ms,nope")) == \
        "Invalid config(s): retention.ms,nope"


def test_missing_topic(configs):
    assert ok(configs("--topic", "nope", "--describe")) == [
        "The topic 'nope' doesn't exist and doesn't have dynamic config."]
    line = one_error_line(configs("--topic", "nope", "--alter", "--add-config", "retention.ms=1"))
    assert "nope" in line


def test_broker_dynamic_config(configs, admin, topic):
    assert ok(configs("--broker", "0", "--alter", "--add-config", "log.retention.ms=123456")) == [
        "Completed updating config for broker 0."]
    try:
        assert ok(configs("--entity-type", "brokers", "--entity-name", "0", "--describe")) == [
            "Dynamic configs for broker 0 are:",
            "  log.retention.ms=123456 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=123456}",
        ]
        # Topics without an override now inherit it.
        lines = ok(configs("--topic", topic, "--describe", "--all"))
        assert "  retention.ms=123456 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.ms=123456}" in lines
    finally:
        ok(configs("--broker", "0", "--alter", "--delete-config", "log.retention.ms"))
    assert ok(configs("--broker", "0", "--describe")) == ["Dynamic configs for broker 0 are:"]


def test_broker_default_config(configs):
    assert ok(configs("--entity-type", "brokers", "--entity-default", "--alter",
                      "--add-config", "log.retention.bytes=999999")) == [
        "Completed updating default config for brokers in the cluster."]
    try:
        assert ok(configs("--entity-type", "brokers", "--entity-default", "--describe")) == [
            "Default configs for brokers in the cluster are:",
            "  log.retention.bytes=999999 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:"
            "log.retention.bytes=999999, DEFAULT_CONFIG:log.retention.bytes=-1}",
        ]
        lines = ok(configs("--entity-type", "brokers", "--describe"))
        assert lines[0] == "Dynamic configs for broker 0 are:"
        assert "Default configs for brokers in the cluster are:" in lines
    finally:
        ok(configs("--broker-defaults", "--alter", "--delete-config", "log.retention.bytes"))


def test_static_broker_config_cannot_be_altered(configs):
    line = one_error_line(configs("--broker", "0", "--alter", "--add-config", "auto.create.topics.enable=false"))
    assert "auto.create.topics.enable" in line


def test_unknown_broker(configs):
    assert ok(configs("--broker", "7", "--describe")) == [
        "The broker '7' doesn't exist and doesn't have dynamic config."]


def test_command_line_errors(broker):
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    cases = [
        ([*bs, "--topic", "t"], "Command must include exactly one action: --describe, --alter"),
        (["--topic", "t", "--describe"], "Either --bootstrap-server or --bootstrap-controller must be specified."),
        ([*bs, "--describe"], "At least one entity type must be specified"),
        ([*bs, "--entity-type", "widgets", "--describe"], "Invalid entity type widgets"),
        ([*bs, "--entity-type", "ips", "--describe"], "not supported"),
        ([*bs, "--broker", "abc", "--describe"], "must be a valid integer broker id, but it is: abc"),
        ([*bs, "--entity-type", "topics", "--alter", "--add-config", "a=1"],
         "An entity name must be specified with --alter of topics"),
        ([*bs, "--topic", "t", "--alter"],
         "At least one of --add-config, --add-config-file, or --delete-config must be specified with --alter"),
        ([*bs, "--topic", "t", "--describe", "--add-config", "a=1"], "can't be used with option"),
        ([*bs, "--topic", "t", "--entity-type", "topics", "--describe"], "Duplicate entity type(s) specified: topics"),
        ([*bs, "--topic", "t", "--entity-name", "u", "--describe"], "should not be used in conjunction"),
        ([*bs, "--topic", "t", "--alter", "--add-config", "a=1=2"], "must be in the format"),
        ([*bs, "--topic", "t", "--alter", "--add-config", "a b=1"], "Invalid character found for config key: a b"),
        ([*bs, "--topic", "bad name", "--describe"], 'Topic name "bad name" is illegal'),
    ]
    for args, expected in cases:
        line = one_error_line(samsa("configs", *args))
        assert expected in line, (args, line)


def test_parse_add_config():
    assert parse_add_config("a=1,b=[x,y],c= 3 ") == {"a": "1", "b": "x,y", "c": "3"}
    assert parse_add_config("ssl.endpoint.identification.algorithm=") == {"ssl.endpoint.identification.algorithm": ""}
    with pytest.raises(UsageError):
        parse_add_config("a")
