"""A broker with one listener of each security protocol, and the test CA it trusts."""

from __future__ import annotations

import pytest

from broker_process import BrokerProcess, free_port
from sec_certs import PASSWORD, make_certs

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret" user_bob="bob-secret";')


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, certs):
    """PLAINTEXT, SSL (client certificates requested), MTLS (SSL, certificates required),
    SASL_PLAINTEXT and SASL_SSL (PLAIN and SCRAM-SHA-512); keystore PKCS12, truststore PEM."""
    ports = {n: free_port() for n in ("PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL")}
    broker = BrokerProcess(tmp_path_factory.mktemp("secure"), port=ports["PLAINTEXT"], **{
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,MTLS:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "SASL_SSL:SASL_SSL",
        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": certs.p12("broker"), "ssl.keystore.password": PASSWORD,
        "ssl.truststore.type": "PEM", "ssl.truststore.location": certs.ca, "ssl.client.auth": "requested",
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
    })
    broker.ports = ports
    broker.start()
    yield broker
    broker.stop()
