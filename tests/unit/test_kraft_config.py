"""Kafka 4's KRaft keys in server.properties: names, types, defaults and checks as Kafka's (issue 34)."""

from __future__ import annotations

import logging
import os
import re

import pytest

from samsa.broker_config import BROKER_KEYS, BrokerConfig, ConfigError

KRAFT_KEYS = ["process.roles", "node.id", "controller.quorum.voters", "controller.quorum.bootstrap.servers",
              "controller.listener.names", "metadata.log.dir", "controller.quorum.election.timeout.ms",
              "controller.quorum.fetch.timeout.ms", "controller.quorum.election.backoff.max.ms",
              "controller.quorum.request.timeout.ms", "controller.quorum.retry.backoff.ms",
              "controller.quorum.append.linger.ms", "controller.quorum.fetch.snapshot.max.bytes",
              "controller.quorum.fetch.max.bytes", "controller.quorum.auto.join.enable", "metadata.log.segment.bytes",
              "metadata.log.segment.ms", "metadata.max.retention.bytes", "metadata.max.retention.ms",
              "metadata.log.max.record.bytes.between.snapshots", "metadata.log.max.snapshot.interval.ms",
              "metadata.max.idle.interval.ms", "broker.heartbeat.interval.ms", "broker.session.timeout.ms",
              "initial.broker.registration.timeout.ms"]

COMBINED = {"process.roles": "broker,controller", "node.id": "1", "controller.quorum.voters": "1@localhost:9093",
            "controller.listener.names": "CONTROLLER",
            "listeners": "PLAINTEXT://localhost:9092,CONTROLLER://localhost:9093",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"}


def test_kafka4_server_properties_is_known(caplog):
    """Kafka 4's shipped KRaft server.properties: no "isn't a known config" warning (the issue's trap)."""
    caplog.set_level(logging.WARNING)
    c = BrokerConfig(dict(COMBINED, **{"controller.quorum.bootstrap.servers": "localhost:9093"}))
    assert "isn't a known config" not in caplog.text
    assert c["process.roles"] == ["broker", "controller"] and c["node.id"] == 1
    assert c.security_protocol("CONTROLLER") == "PLAINTEXT" and c.inter_broker_listener == "PLAINTEXT"


def test_controller_listener_not_in_the_map_is_plaintext_and_never_inter_broker():
    props = dict(COMBINED, **{"listeners": "CONTROLLER://localhost:9093,PLAINTEXT://localhost:9092"})
    del props["listener.security.protocol.map"]
    c = BrokerConfig(props)
    assert c.security_protocol("CONTROLLER") == "PLAINTEXT" and c.inter_broker_listener == "PLAINTEXT"


def test_controller_only_needs_no_broker_listener():
    c = BrokerConfig(dict(COMBINED, **{"process.roles": "controller", "listeners": "CONTROLLER://localhost:9093"}))
    assert c.roles == ["controller"]


def test_zookeeper_mode_untouched():
    c = BrokerConfig({"broker.id": "0", "zookeeper.connect": "localhost:2181"})
    assert c["process.roles"] == [] and c.roles == ["broker"] and c.broker_id == 0


@pytest.mark.parametrize("change, message", [
    ({"process.roles": "broker,broker"}, "Duplicate role names found in `process.roles`"),
    ({"process.roles": "zookeeper"}, "Unknown process role 'zookeeper' (only 'broker' and 'controller' are allowed"),
    ({"node.id": None}, 'Missing required configuration "node.id" which has no default value.'),
    ({"node.id": "-1"}, "Invalid value -1 for configuration node.id: Value must be at least 0"),
    ({"controller.quorum.voters": "localhost:9093"}, "Unable to parse voter localhost:9093"),
    ({"controller.quorum.voters": "2@localhost:9093"}, "the node id 1 must be included in the set of voters "
                                                       "controller.quorum.voters=Set(2)"),
    ({"controller.quorum.voters": None, "controller.quorum.bootstrap.servers": "localhost"},
     "Invalid url in controller.quorum.bootstrap.servers: localhost"),
    ({"controller.listener.names": None}, 'Missing required configuration "controller.listener.names"'),
    ({"controller.listener.names": "CTRL"}, "The listeners config must contain a listener with the name from "
                                            "controller.listener.names (CTRL)"),
    ({"zookeeper.connect": "localhost:2181"}, "zookeeper.connect and process.roles cannot both be set"),
    ({"controller.quorum.election.timeout.ms": "-1"}, "Value must be at least 0"),
    ({"metadata.log.segment.bytes": "1024"}, "Value must be at least 8388608"),
])
def test_kafkas_checks(change, message):
    props = {k: v for k, v in {**COMBINED, **change}.items() if v is not None}
    with pytest.raises(ConfigError) as e:
        BrokerConfig(props)
    assert message in str(e.value)


def test_types_and_defaults_as_kafkas():
    """Against Kafka 4.4.0's own config documentation (kafka.server.KafkaConfig's main prints it)."""
    if os.environ.get("SAMSA_DIFF_SIDE", "both") == "samsa":
        pytest.skip("SAMSA_DIFF_SIDE=samsa: Kafka's side is not run")
    import kafka_process as kp
    r = kp.run_tool("kafka.server.KafkaConfig")
    assert r.returncode == 0
    docs = dict((name, (t, d)) for name, t, d in re.findall(
        r'<h4><a id="([^"]+)"></a>.*?<tr><th>Type:</th><td>([^<]*)</td></tr>\s*<tr><th>Default:</th><td>([^<]*)</td>',
        r.stdout, re.S))
    types = {"boolean": "bool"}
    for name in KRAFT_KEYS:
        kafka_type, kafka_default = docs[name]
        key = BROKER_KEYS[name]
        assert key.type == types.get(kafka_type, kafka_type), name
        shown = kafka_default.split(" (")[0]
        if name in ("process.roles", "node.id", "controller.listener.names", "controller.quorum.voters",
                    "controller.quorum.bootstrap.servers"):
            continue  # no default in Kafka (required, or an empty list); Samsa: empty means ZooKeeper mode
        expected = None if shown == "null" else (shown == "true" if key.type == "bool" else
                                                 int(shown) if key.type in ("int", "long") else shown)
        assert key.default == expected, name
