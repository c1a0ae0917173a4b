"""ACLs on one broker, as the issue states them: alice may produce to payments but not read
it; bob in group fraud may read but not write; neither sees the other's topics; a DENY beats
an ALLOW; a PREFIXED ACL covers payments-eu. ACLs are added with confluent-kafka's Admin."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, NewTopic,
                                   ResourcePatternType, ResourceType)

from broker_process import BrokerProcess
from waiting import wait_until

JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";')


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    b = BrokerProcess(tmp_path_factory.mktemp("acl"), **{
        "listener.security.protocol.map": "PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN", "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin",
        "allow.everyone.if.no.acl.found": "false"})
    b.start()
    yield b
    b.stop()


def conf(broker, user: str) -> dict:
    return {"bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
            "sasl.username": user, "sasl.password": f"{user}-pw"}


def acl(principal, rtype, name, op, perm=AclPermissionType.ALLOW, pattern=ResourcePatternType.LITERAL):
    return AclBinding(rtype, name, pattern, f"User:{principal}", "*", op, perm)


@pytest.fixture(scope="module")
def tenants(acl_broker):
    admin = AdminClient(conf(acl_broker, "admin"))
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("payments", "payments-eu", "fraud-alerts",
                                                              "alice-private")]).values():
        f.result(15)
    T, G = ResourceType.TOPIC, ResourceType.GROUP
    bindings = [
        acl("alice", T, "payments", AclOperation.WRITE),
        acl("alice", T, "payments-", AclOperation.WRITE, pattern=ResourcePatternType.PREFIXED),
        acl("alice", T, "alice-private", AclOperation.WRITE),
        acl("bob", T, "payments", AclOperation.READ, pattern=ResourcePatternType.PREFIXED),
        acl("bob", T, "payments-eu", AclOperation.READ, perm=AclPermissionType.DENY),
        acl("bob", G, "fraud", AclOperation.READ),
        acl("bob", T, "fraud-alerts", AclOperation.ALL),
    ]
    for f in admin.create_acls(bindings).values():
        f.result(15)
    return acl_broker


def produce(c: dict, topic: str) -> object:
    p = Producer({**c, "message.timeout.ms": 10000})
    out = []
    p.produce(topic, b"v", on_delivery=lambda e, m: out.append(e))
    p.flush(15)
    return out[0] if out else "no delivery report"


def read_error(c: dict, topic: str, group: str) -> object:
    """The first record (None: no error) or error read from ``topic`` in ``group``."""
    consumer = Consumer({**c, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        m = wait_until(lambda: consumer.poll(0.5), f"a record or an error from {topic}", 20)
        return m.error()
    finally:
        consumer.close()


def test_alice_writes_payments_but_cannot_read_it(tenants):
    assert produce(conf(tenants, "alice"), "payments") is None
    err = read_error(conf(tenants, "alice"), "payments", "alice-group")
    assert err is not None and "AUTHORIZATION" in err.name(), err


def test_bob_reads_in_group_fraud_but_cannot_write(tenants):
    assert produce(conf(tenants, "admin"), "payments") is None
    assert read_error(conf(tenants, "bob"), "payments", "fraud") is None
    err = produce(conf(tenants, "bob"), "payments")
    assert err is not None and err.name() == "TOPIC_AUTHORIZATION_FAILED", err


def test_neither_sees_the_others_topics(tenants):
    alice = set(AdminClient(conf(tenants, "alice")).list_topics(timeout=10).topics)
    bob = set(AdminClient(conf(tenants, "bob")).list_topics(timeout=10).topics)
    assert {"payments", "payments-eu", "alice-private"} <= alice and "fraud-alerts" not in alice
    assert {"payments", "fraud-alerts"} <= bob and "alice-private" not in bob


def test_deny_beats_allow_and_prefixed_covers(tenants):
    assert produce(conf(tenants, "alice"), "payments-eu") is None  # PREFIXED payments-
    err = read_error(conf(tenants, "bob"), "payments-eu", "fraud")  # PREFIXED ALLOW, LITERAL DENY
    assert err is not None and err.name() == "TOPIC_AUTHORIZATION_FAILED", err
    log = tenants.log_text()
    assert "Principal = User:bob is Denied operation = READ" in log


def test_acls_are_described_and_deleted(tenants):
    admin = AdminClient(conf(tenants, "admin"))
    from confluent_kafka.admin import AclBindingFilter
    f = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None, AclOperation.ANY,
                         AclPermissionType.ANY)
    found = admin.describe_acls(f).result(15)
    assert len(found) == 3
    topic = f"tmp-{uuid.uuid4().hex[:6]}"
    one = acl("alice", ResourceType.TOPIC, topic, AclOperation.READ)
    admin.create_acls([one])[one].result(15)
    gone = admin.delete_acls([AclBindingFilter(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, None, None,
                                               AclOperation.ANY, AclPermissionType.ANY)])
    assert len(list(gone.values())[0].result(15)) == 1
    assert len(admin.describe_acls(f).result(15)) == 3
    # a non-super user may not change ACLs
    bob = AdminClient(conf(tenants, "bob"))
    with pytest.raises(Exception, match="AUTHORIZATION"):
        bob.create_acls([one])[one].result(15)
