"""Security on a three-broker ZooKeeper cluster whose only listener is SASL_SSL: brokers
replicate over it (PLAIN, as User:broker), and an ACL added or removed through one broker
is enforced by the others (the partition's leader among them) once ZooKeeper tells them."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from cluster_harness import Cluster
from samsa.client.types import NewTopic
from sec_certs import PASSWORD, make_certs
from waiting import wait_until

USERS = {"broker": "broker-pw", "admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" '
        'password="broker-pw" ' + " ".join(f'user_{u}="{p}"' for u, p in USERS.items()) + ";")


@pytest.fixture(scope="module")
def secure_cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("secure-cluster")
    certs = make_certs(root / "certs", clients=())
    admin_conf = {"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
                  "sasl.jaas.config": 'org.apache.kafka.common.security.plain.PlainLoginModule required '
                                      'username="admin" password="admin-pw";',
                  "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    cluster = Cluster(root, client_config=admin_conf, **{
        "listener.security.protocol.map": "PLAINTEXT:SASL_SSL",  # the one listener, inter-broker too
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": certs.p12("broker"),
        "ssl.keystore.password": PASSWORD, "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca,
        "sasl.enabled.mechanisms": "PLAIN", "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:broker;User:admin", "allow.everyone.if.no.acl.found": "false"})
    cluster.certs = certs
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def conf(cluster: Cluster, user: str, broker_id: int | None = None) -> dict:
    brokers = cluster.brokers.values() if broker_id is None else [cluster.brokers[broker_id]]
    return {"bootstrap.servers": ",".join(b.bootstrap for b in brokers), "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user],
            "ssl.ca.location": str(cluster.certs.ca)}


def produce_one(config: dict, topic: str) -> KafkaError | None:
    """The delivery error of one record (None: written)."""
    p = Producer({**config, "acks": "all", "message.timeout.ms": 8000})
    out: list = []
    p.produce(topic, b"v", on_delivery=lambda e, m: out.append(e))
    p.flush(15)
    return out[0] if out else KafkaError(KafkaError._MSG_TIMED_OUT)


def test_brokers_replicate_over_the_sasl_ssl_listener(secure_cluster):
    with secure_cluster.admin() as admin:
        admin.create_topics([NewTopic("replicated", 1, 3, config={"min.insync.replicas": "3"})])
    wait_until(lambda: len(secure_cluster.partition("replicated", 0)[2]) == 3, "three replicas in sync")
    for _ in range(3):  # acks=all with min.insync.replicas=3: every follower fetched it over SASL_SSL
        assert produce_one(conf(secure_cluster, "admin"), "replicated") is None
    wait_until(lambda: len(secure_cluster.partition("replicated", 0)[2]) == 3, "the ISR still full")
    logs = "".join(b.log_path.read_text() for b in secure_cluster.brokers.values())
    assert "[mechanism PLAIN]" not in logs  # (port probes at start-up show as TLS handshakes cut short)


def test_an_acl_added_through_one_broker_is_enforced_by_the_others(secure_cluster):
    with secure_cluster.admin() as admin:
        admin.create_topics([NewTopic(t, 1, 3) for t in ("payments", "bob-private")])
    [leader] = wait_until(lambda: [x for x in [secure_cluster.partition("payments", 0)[0]] if x >= 0],
                          "a leader for payments")
    via = next(i for i in secure_cluster.brokers if i != leader)  # ACLs go through a broker that is not the leader
    other = next(i for i in secure_cluster.brokers if i not in (leader, via))
    alice, bob = conf(secure_cluster, "alice", other), conf(secure_cluster, "bob", other)
    refused = produce_one(alice, "payments")
    assert refused is not None and refused.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    admin = AdminClient(conf(secure_cluster, "admin", via))
    T, G, LIT = ResourceType.TOPIC, ResourceType.GROUP, ResourcePatternType.LITERAL
    allow = AclPermissionType.ALLOW
    for f in admin.create_acls([
            AclBinding(T, "payments", LIT, "User:alice", "*", AclOperation.WRITE, allow),
            AclBinding(T, "payments", LIT, "User:bob", "*", AclOperation.READ, allow),
            AclBinding(T, "bob-private", LIT, "User:bob", "*", AclOperation.ALL, allow),
            AclBinding(G, "fraud", LIT, "User:bob", "*", AclOperation.READ, allow)]).values():
        f.result(15)
    wait_until(lambda: produce_one(alice, "payments") is None, "alice's write accepted by the leader", 30)
    assert produce_one(bob, "payments").code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    c = Consumer({**bob, "group.id": "fraud", "auto.offset.reset": "earliest"})
    try:
        c.subscribe(["payments"])
        msg = wait_until(lambda: (m := c.poll(0.5)) is not None and m.error() is None and m, "bob reads payments")
        assert msg.value() == b"v"
    finally:
        c.close()
    seen = AdminClient(alice).list_topics(timeout=15).topics
    assert "payments" in seen and "bob-private" not in seen

    # A DENY added through `via` beats the ALLOW on the leader too; deleting it through `other` lifts it.
    deny = AclBinding(T, "payments", LIT, "User:alice", "*", AclOperation.WRITE, AclPermissionType.DENY)
    for f in admin.create_acls([deny]).values():
        f.result(15)
    wait_until(lambda: (e := produce_one(alice, "payments")) is not None
               and e.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, "alice denied by the leader", 30)
    deleter = AdminClient(conf(secure_cluster, "admin", other))
    flt = AclBindingFilter(T, "payments", LIT, "User:alice", "*", AclOperation.WRITE, AclPermissionType.DENY)
    for f in deleter.delete_acls([flt]).values():
        assert len(f.result(15)) == 1
    wait_until(lambda: produce_one(alice, "payments") is None, "alice's write accepted again", 30)
