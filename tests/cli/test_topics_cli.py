"""``samsa topics`` (kafka-topics.sh) run as a subprocess against an embedded broker."""

from __future__ import annotations

import socket
import subprocess
import time

import pytest
from cli_tools import error_after_unreachable_warning, one_error_line, samsa








@pytest.fixture
def topics(broker):
    bootstrap = broker.bootstrap_servers

    def run(*args: str) -> subprocess.CompletedProcess:
        return samsa("topics", "--bootstrap-server", bootstrap, *args)
    return run


def listed(run) -> list[str]:
    r = run("--list")
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_walkthrough(topics, admin):
    r = topics("--create", "--topic", "test", "--partitions", "3", "--replication-factor", "1")
    assert (r.returncode, r.stdout, r.stderr) == (0, "Created topic test.\n", "")

    assert "test" in listed(topics)

    topic_id = admin.describe_topics(["test"])["test"].topic_id
    assert len(topic_id) == 22  # Kafka's base64url Uuid
    r = topics("--describe", "--topic", "test")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Topic: test\tTopicId: {topic_id}\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: ",
        "\tTopic: test\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: test\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: test\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0",
    ]

    r = topics("--alter", "--topic", "test", "--partitions", "4")
    assert (r.returncode, r.stderr) == (0, "")
    r = topics("--describe", "--topic", "test")
    lines = r.stdout.splitlines()
    assert lines[0] == f"Topic: test\tTopicId: {topic_id}\tPartitionCount: 4\tReplicationFactor: 1\tConfigs: "
    assert lines[4] == "\tTopic: test\tPartition: 3\tLeader: 0\tReplicas: 0\tIsr: 0"
    assert len(lines) == 5

    r = topics("--alter", "--topic", "test", "--partitions", "2")
    line = one_error_line(r)
    assert line.startswith("Error while executing topic command : ")
    assert "4 partition(s)" in line and "would not be an increase" in line

    r = topics("--delete", "--topic", "test")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")
    assert "test" not in listed(topics)


def test_replication_factor_above_broker_count_is_refused(topics):
    r = topics("--create", "--topic", "rf2", "--partitions", "1", "--replication-factor", "2")
    line = one_error_line(r)
    assert "replication factor of 2 cannot be reached because only 1 broker(s) are registered" in line
    assert "rf2" not in listed(topics)


@pytest.mark.parametrize("name", ["bad name", "a/b", "x" * 250, ".."])
def test_invalid_topic_name_is_refused(topics, name):
    line = one_error_line(topics("--create", "--topic", name, "--partitions", "1"))
    assert "Topic name is invalid: " in line  # as Kafka 4's controller words it


def test_create_with_configs_and_describe_overrides(topics):
    r = topics("--create", "--topic", "with-cfg", "--partitions", "1", "--replication-factor", "1",
               "--config", "retention.ms=1000", "--config", "cleanup.policy=compact")
    assert r.returncode == 0, r.stderr
    head = topics("--describe", "--topic", "with-cfg").stdout.splitlines()[0]
    assert head.endswith("\tConfigs: cleanup.policy=compact,retention.ms=1000")
    r = topics("--describe", "--topics-with-overrides")
    assert [line.split("\t")[0] for line in r.stdout.splitlines()] == ["Topic: with-cfg"]


def test_create_twice(topics):
    assert topics("--create", "--topic", "twice", "--partitions", "1").returncode == 0
    line = one_error_line(topics("--create", "--topic", "twice", "--partitions", "1"))
    assert "Topic 'twice' already exists." in line
    r = topics("--create", "--topic", "twice", "--partitions", "1", "--if-not-exists")
    assert (r.returncode, r.stdout, r.stderr) == (0, "", "")


def test_bad_config_on_create(topics):
    line = one_error_line(topics("--create", "--topic", "badcfg", "--partitions", "1", "--config", "retention.ms=abc"))
    assert "retention.ms" in line and "abc" in line
    line = one_error_line(topics("--create", "--topic", "badcfg", "--partitions", "1", "--config", "retention.ms"))
    assert 'must be in the format "key=val"' in line


def test_missing_topic(topics):
    line = one_error_line(topics("--describe", "--topic", "nope"))
    assert line == "Topic 'nope' does not exist as expected"
    assert one_error_line(topics("--delete", "--topic", "nope")) == "Topic 'nope' does not exist as expected"
    r = topics("--describe", "--topic", "nope", "--if-exists")
    assert (r.returncode, r.stdout) == (0, "")


def test_topic_regex(topics):
    for name in ("re-a", "re-b", "other-re"):
        assert topics("--create", "--topic", name, "--partitions", "1").returncode == 0
    r = topics("--list", "--topic", "re-.*")
    assert r.stdout.split() == ["re-a", "re-b"]
    r = topics("--describe", "--topic", "re-a,other-re")  # Kafka's include list: commas separate alternatives
    assert [line.split("\t")[0] for line in r.stdout.splitlines() if not line.startswith("\t")] == [
        "Topic: other-re", "Topic: re-a"]
    assert topics("--delete", "--topic", "re-.*").returncode == 0
    names = listed(topics)
    assert "re-a" not in names and "re-b" not in names and "other-re" in names


def test_replica_assignment(topics):
    r = topics("--create", "--topic", "assigned", "--replica-assignment", "0,0")
    assert r.returncode == 0, r.stderr
    lines = topics("--describe", "--topic", "assigned").stdout.splitlines()
    assert "\tPartitionCount: 2\tReplicationFactor: 1\t" in lines[0]
    r = topics("--alter", "--topic", "assigned", "--partitions", "3", "--replica-assignment", "0,0,0")
    assert r.returncode == 0, r.stderr
    lines = topics("--describe", "--topic", "assigned").stdout.splitlines()
    assert lines[-1] == "\tTopic: assigned\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0"
    line = one_error_line(topics("--create", "--topic", "assigned2", "--replica-assignment", "0:0"))
    assert line == "Partition replica lists may not contain duplicate entries: 0"
    line = one_error_line(topics("--create", "--topic", "assigned2", "--replica-assignment", "5"))
    assert "5" in line


def test_report_filters(topics):
    assert topics("--create", "--topic", "healthy", "--partitions", "2").returncode == 0
    for flag in ("--under-replicated-partitions", "--unavailable-partitions", "--under-min-isr-partitions"):
        r = topics("--describe", "--topic", "healthy", flag)
        assert (r.returncode, r.stdout) == (0, ""), flag
    r = topics("--describe", "--topic", "healthy", "--at-min-isr-partitions")
    assert r.stdout.splitlines() == ["\tTopic: healthy\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
                                     "\tTopic: healthy\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0"]


def test_command_line_errors(broker):
    bs = ["--bootstrap-server", broker.bootstrap_servers]
    cases = [
        ([*bs], "Command must include exactly one action: --list, --describe, --create, --alter or --delete"),
        ([*bs, "--list", "--create"], "Command must include exactly one action"),
        (["--list"], "--bootstrap-server must be specified"),
        ([*bs, "--create", "--partitions", "1"], 'Missing required argument "[topic]"'),
        ([*bs, "--alter", "--topic", "x"], 'Missing required argument "[partitions]"'),
        ([*bs, "--list", "--partitions", "3"], "can't be used with option \"[list]\""),
        ([*bs, "--create", "--topic", "x", "--partitions", "0"], "The partitions must be greater than 0"),
        ([*bs, "--create", "--topic", "x", "--replication-factor", "0"], "The replication factor must be between 1"),
        ([*bs, "--create", "--topic", "x", "--partitions", "many"], "invalid int value"),
        ([*bs, "--list", "--no-such-flag"], "unrecognized arguments"),
        (["--zookeeper", "localhost:2181", "--list"], "--bootstrap-server"),
    ]
    for args, expected in cases:
        line = one_error_line(samsa("topics", *args))
        assert expected in line, (args, line)


def test_no_args_prints_usage():
    for tool in ("topics", "configs", "dump-log"):
        r = samsa(tool)
        assert r.returncode != 0
        assert "usage: samsa " + tool in r.stderr
        assert "--bootstrap-server" in r.stderr or "--files" in r.stderr


def test_unreachable_bootstrap_server(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the tool runs: nothing listens there
    config = tmp_path / "client.properties"
    config.write_text("request.timeout.ms=1500\n")
    start = time.monotonic()
    r = samsa("topics", "--bootstrap-server", f"127.0.0.1:{port}", "--command-config", str(config), "--list")
    elapsed = time.monotonic() - start
    line = error_after_unreachable_warning(r)
    assert f"127.0.0.1:{port}" in line and "1500 ms" in line
    assert elapsed < 20


def test_missing_command_config(broker):
    line = one_error_line(samsa("topics", "--bootstrap-server", broker.bootstrap_servers,
                                "--command-config", "/nonexistent/x.properties", "--list"))
    assert "/nonexistent/x.properties" in line


def test_bootstrap_server_with_a_protocol_prefix(broker):
    """``--bootstrap-server PLAINTEXT://host:port`` (Confluent's and Kafka's listener form) works as Kafka's tools."""
    r = samsa("topics", "--bootstrap-server", f"PLAINTEXT://{broker.bootstrap_servers}", "--list")
    assert r.returncode == 0, r.stderr
