"""The tools against a SASL_SSL broker with an authorizer: `samsa acls` with kafka-acls.sh's
flags, `samsa configs --entity-type users|clients` for SCRAM credentials and quotas, and every
tool's --command-config (the console tools' --producer.config / --consumer.config)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, Producer

from broker_process import BrokerProcess
from cli_tools import samsa
from sec_certs import PASSWORD, make_certs

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-pw" user_alice="alice-pw";')


@pytest.fixture(scope="module")
def tools_broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("tools")
    certs = make_certs(root / "certs", clients=())
    b = BrokerProcess(root, **{
        "listener.security.protocol.map": "PLAINTEXT:SASL_SSL",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": certs.p12("broker"),
        "ssl.keystore.password": PASSWORD,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false"})
    b.start()
    props = root / "admin.properties"
    props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                     "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                     'username="admin" password="admin-pw";\n'
                     f"ssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n")
    b.props, b.certs = str(props), certs
    yield b
    b.stop()


def tool(broker, name: str, *args: str, config_flag: str = "--command-config", stdin: str | None = None):
    r = samsa(name, "--bootstrap-server", broker.bootstrap, config_flag, broker.props, *args, input=stdin)
    assert r.returncode == 0, (name, args, r.stderr)
    return r.stdout


def test_acls_tool(tools_broker):
    out = tool(tools_broker, "acls", "--add", "--producer", "--allow-principal", "User:alice", "--topic", "payments")
    assert "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=payments, patternType=LITERAL)`" in out
    assert "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)" in out
    tool(tools_broker, "acls", "--add", "--consumer", "--allow-principal", "User:bob", "--topic", "payments",
         "--group", "fraud")
    tool(tools_broker, "acls", "--add", "--deny-principal", "User:bob", "--deny-host", "10.0.0.9", "--operation",
         "Write", "--topic", "pay", "--resource-pattern-type", "PREFIXED")
    tool(tools_broker, "acls", "--add", "--allow-principal", "User:alice", "--operation", "IdempotentWrite",
         "--cluster")
    listed = tool(tools_broker, "acls", "--list", "--topic", "payments")
    assert listed.count("principal=User:alice") == 3 and listed.count("principal=User:bob") == 2
    assert "operation=CREATE" in listed and "operation=READ" in listed
    prefixed = tool(tools_broker, "acls", "--list", "--topic", "pay", "--resource-pattern-type", "PREFIXED")
    assert "(principal=User:bob, host=10.0.0.9, operation=WRITE, permissionType=DENY)" in prefixed
    everything = tool(tools_broker, "acls", "--list")
    assert "resourceType=CLUSTER, name=kafka-cluster" in everything and "operation=IDEMPOTENT_WRITE" in everything
    assert "resourceType=GROUP, name=fraud" in everything
    after = tool(tools_broker, "acls", "--remove", "--force", "--allow-principal", "User:alice", "--operation",
                 "Create", "--topic", "payments")
    assert "operation=CREATE" not in after and "operation=WRITE" in after
    tool(tools_broker, "acls", "--remove", "--force", "--group", "fraud")
    assert "fraud" not in tool(tools_broker, "acls", "--list", "--group", "fraud")
    mine = tool(tools_broker, "acls", "--list", "--principal", "User:bob")
    assert "ACLs for principal `User:bob`" in mine and "User:alice" not in mine
    bad = samsa("acls", "--bootstrap-server", tools_broker.bootstrap, "--command-config", tools_broker.props,
                "--add", "--allow-principal", "User:x", "--operation", "Fly", "--topic", "t")
    assert bad.returncode == 1 and bad.stderr.strip() == "Invalid operation Fly"


def _scram_producer(broker, user: str, password: str, mechanism: str) -> KafkaError | None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_SSL",
                  "sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password,
                  "ssl.ca.location": str(broker.certs.ca), "message.timeout.ms": 8000})
    out: list = []
    p.produce("carol-t", b"v", on_delivery=lambda e, m: out.append(e))
    p.flush(15)
    return out[0] if out else KafkaError(KafkaError._MSG_TIMED_OUT)


def test_configs_tool_scram_credentials_and_quotas(tools_broker):
    tool(tools_broker, "topics", "--create", "--topic", "carol-t", "--partitions", "1")
    tool(tools_broker, "acls", "--add", "--allow-principal", "User:carol", "--operation", "All", "--topic", "carol-t")
    out = tool(tools_broker, "configs", "--alter", "--entity-type", "users", "--entity-name", "carol",
               "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret],producer_byte_rate=1048576")
    assert out.strip() == "Completed updating config for user carol."
    assert _scram_producer(tools_broker, "carol", "carol-secret", "SCRAM-SHA-256") is None
    described = tool(tools_broker, "configs", "--describe", "--entity-type", "users", "--entity-name", "carol")
    assert "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-256=iterations=8192" in described
    assert "Quota configs for user-principal 'carol' are producer_byte_rate=1048576.0" in described
    assert "carol-secret" not in described + tools_broker.log_text()
    tool(tools_broker, "configs", "--alter", "--entity-type", "clients", "--entity-default",
         "--add-config", "consumer_byte_rate=2097152")
    tool(tools_broker, "configs", "--alter", "--entity-type", "users", "--entity-name", "carol",
         "--entity-type", "clients", "--entity-name", "app-1", "--add-config", "request_percentage=50")
    clients = tool(tools_broker, "configs", "--describe", "--entity-type", "clients")
    assert "Quota configs for the default client-id are consumer_byte_rate=2097152.0" in clients
    both = tool(tools_broker, "configs", "--describe", "--entity-type", "users", "--entity-name", "carol",
                "--entity-type", "clients", "--entity-name", "app-1")
    assert "Quota configs for user-principal 'carol', client-id 'app-1' are request_percentage=50.0" in both
    tool(tools_broker, "configs", "--alter", "--entity-type", "users", "--entity-name", "carol",
         "--delete-config", "SCRAM-SHA-256,producer_byte_rate")
    gone = tool(tools_broker, "configs", "--describe", "--entity-type", "users", "--entity-name", "carol")
    assert "SCRAM" not in gone and "producer_byte_rate" not in gone
    refused = _scram_producer(tools_broker, "carol", "carol-secret", "SCRAM-SHA-256")
    assert refused is not None
    bad = samsa("configs", "--bootstrap-server", tools_broker.bootstrap, "--command-config", tools_broker.props,
                "--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config", "colour=blue")
    assert bad.returncode == 1 and "Invalid config(s): colour" in bad.stderr


def test_every_tool_reads_its_client_config(tools_broker):
    tool(tools_broker, "topics", "--create", "--topic", "tools-t", "--partitions", "1")
    assert "tools-t" in tool(tools_broker, "topics", "--list")
    tool(tools_broker, "console-producer", "--topic", "tools-t", config_flag="--producer.config", stdin="a\nb\n")
    got = tool(tools_broker, "console-consumer", "--topic", "tools-t", "--from-beginning", "--max-messages", "2",
               "--group", "tools-g", config_flag="--consumer.config")
    assert got.split() == ["a", "b"]
    assert "tools-g" in tool(tools_broker, "consumer-groups", "--list")
    assert "All configs for topic tools-t are:" in tool(tools_broker, "configs", "--describe", "--entity-type",
                                                        "topics", "--entity-name", "tools-t", "--all")
    tool(tools_broker, "leader-election", "--election-type", "preferred", "--all-topic-partitions",
         config_flag="--admin.config")
    tool(tools_broker, "reassign-partitions", "--list")
    tool(tools_broker, "transactions", "list")
