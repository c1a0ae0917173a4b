"""Confluent's form of ``kafkastore.bootstrap.servers``: endpoints named by security protocol
(``PLAINTEXT://h:p,SSL://h:p,SASL_PLAINTEXT://h:p,SASL_SSL://h:p``, as Confluent's documentation and its
shipped schema-registry.properties write them). The registry keeps those of its
``kafkastore.security.protocol`` and leaves the others out, as Confluent's registry does; none left,
or a protocol that is not one of the four, and it exits 1 with one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from broker_process import ROOT
from conftest import PLAIN_JAAS  # noqa: F401  (the broker's PLAIN users: alice, bob)
from registry_process import RegistryProcess
from samsa.schema_registry.config import RegistryConfigError, bootstrap_brokers
from waiting import wait_until

SCHEMA = Schema(json.dumps({"type": "record", "name": "F", "fields": [{"name": "a", "type": "int"}]}))


def _all_endpoints(broker) -> str:
    return ",".join(f"{p}://127.0.0.1:{broker.ports[p]}" for p in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"))


def test_endpoints_filtered_by_security_protocol():
    both = "PLAINTEXT://a:1,SSL://b:2, c:3"
    assert bootstrap_brokers(both, "PLAINTEXT") == "PLAINTEXT://a:1,PLAINTEXT://c:3"
    assert bootstrap_brokers(both, "ssl") == "SSL://b:2,SSL://c:3"
    with pytest.raises(RegistryConfigError, match="at least one endpoint matching"):
        bootstrap_brokers("SSL://b:2", "PLAINTEXT")
    with pytest.raises(RegistryConfigError, match="Only PLAINTEXT, SSL"):
        bootstrap_brokers("TRACE://b:2", "TRACE")


@pytest.mark.parametrize("protocol", ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
def test_registry_reaches_its_protocols_endpoint(secure_broker, certs, tmp_path, protocol):
    props = {"schema.registry.group.session.timeout.ms": "10000", "kafkastore.security.protocol": protocol, "kafkastore.topic": f"_schemas_{protocol.lower()}",
             "kafkastore.topic.replication.factor": "1", "schema.registry.group.id": f"sr-{protocol.lower()}"}
    if "SSL" in protocol:
        props.update({"kafkastore.ssl.truststore.type": "PEM", "kafkastore.ssl.truststore.location": str(certs.ca)})
    if protocol.startswith("SASL"):
        props.update({"kafkastore.sasl.mechanism": "PLAIN", "kafkastore.sasl.jaas.config":
                      'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                      'password="alice-secret";'})
    registry = RegistryProcess(tmp_path, _all_endpoints(secure_broker), **props).start()
    try:
        wait_until(registry.is_writer, f"the registry over {protocol} elected to write", 60)
        sr = SchemaRegistryClient({"url": registry.url})
        schema_id = sr.register_schema(f"forms-{protocol.lower()}-value", SCHEMA)
        assert sr.get_schema(schema_id).schema_str == SCHEMA.schema_str.replace(" ", "")
    finally:
        registry.stop()
    log = registry.log_path.read_text()
    mine = f"{protocol}://127.0.0.1:{secure_broker.ports[protocol]}"
    assert f"(kafkastore {mine}, topic" in log, log[-2000:]
    assert log.count("Ignoring Kafka broker endpoint") == 3, log[-2000:]


def test_no_endpoint_of_the_protocol_is_one_line_and_exit_1(tmp_path):
    path = tmp_path / "sr.properties"
    path.write_text("listeners=http://127.0.0.1:0\nkafkastore.bootstrap.servers=SSL://127.0.0.1:1\n")
    done = subprocess.run([sys.executable, "-m", "samsa.cli.main", "schema-registry", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "must have at least one endpoint matching kafkastore.security.protocol" in done.stderr
