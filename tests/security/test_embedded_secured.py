"""``samsa.embedded.Broker`` with secured listeners: SSL with client certificates required
(the broker's keystore as KIP-651 PEM text) and SASL_SSL with SCRAM-SHA-512; Samsa's own
producer, consumer and admin over each."""

from __future__ import annotations

import uuid

import pytest

from samsa.client.admin import Admin
from samsa.client.connection import KafkaTimeoutError
from samsa.client.consumer import Consumer
from samsa.client.producer import Producer
from samsa.client.types import TopicPartition
from samsa.embedded import Broker
from samsa.protocol.errors import SaslAuthenticationFailedError
from sec_certs import PASSWORD
from waiting import wait_until


@pytest.fixture(scope="module")
def embedded(certs):
    with Broker({
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": certs.cert("broker").read_text(),
        "ssl.keystore.key": certs.key("broker").read_text(),
        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    }) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap_servers_of("PLAINTEXT")}) as admin:
            admin.alter_user_scram_credentials([("alice", "SCRAM-SHA-512", 8192, "alice-scram")])
        yield broker


def _round_trip(conf: dict, name: str) -> list[bytes]:
    topic = f"embedded-{name}-{uuid.uuid4().hex[:6]}"
    with Producer(conf) as producer:
        producer.send(topic, value=name.encode()).result(30)
    with Consumer({**conf, "auto.offset.reset": "earliest"}) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        consumer.seek_to_beginning()
        return wait_until(lambda: [r.value for r in consumer.poll(0.5)], f"a record over {name}", 30)


def test_samsa_clients_over_secured_listeners_of_the_embedded_broker(embedded, certs):
    assert set(embedded.listeners) == {"PLAINTEXT", "SSL", "SASL_SSL"}
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)}
    mtls = {"bootstrap.servers": embedded.bootstrap_servers_of("SSL"), "security.protocol": "SSL", **trust,
            "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.p12("alice")),
            "ssl.keystore.password": PASSWORD}
    scram = {"bootstrap.servers": embedded.bootstrap_servers_of("SASL_SSL"), "security.protocol": "SASL_SSL", **trust,
             "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                 'username="alice" password="alice-scram";'}
    assert _round_trip(mtls, "ssl") == [b"ssl"]
    assert _round_trip(scram, "sasl-ssl") == [b"sasl-ssl"]
    with Admin(scram) as admin:
        assert any(t.startswith("embedded-ssl-") for t in admin.list_topics())


def test_a_wrong_password_or_a_missing_certificate_is_refused(embedded, certs):
    trust = {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca), "request.timeout.ms": 5000,
             "default.api.timeout.ms": 5000}
    wrong = {"bootstrap.servers": embedded.bootstrap_servers_of("SASL_SSL"), "security.protocol": "SASL_SSL", **trust,
             "sasl.mechanism": "SCRAM-SHA-512",
             "sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                 'username="alice" password="wrong";'}
    no_cert = {"bootstrap.servers": embedded.bootstrap_servers_of("SSL"), "security.protocol": "SSL", **trust}
    with pytest.raises(SaslAuthenticationFailedError, match="invalid credentials"):
        with Admin(wrong) as admin:
            admin.list_topics()
    with pytest.raises(KafkaTimeoutError, match="the broker closed the connection"):
        with Admin(no_cert) as admin:
            admin.list_topics()
    with Admin({**wrong, "sasl.jaas.config": wrong["sasl.jaas.config"].replace("wrong", "alice-scram")}) as admin:
        assert admin.list_topics() is not None  # and everyone else is still served
    with pytest.raises(KeyError, match="no listener 'SASL_PLAINTEXT'"):
        embedded.bootstrap_servers_of("SASL_PLAINTEXT")
