"""Kafka's SSL configs common to brokers and clients (Kafka's ``SslConfigs``): one definition
for ``server.properties`` and for a client's properties."""

from __future__ import annotations

from samsa.configdef import Key, one_of

SSL_COMMON_KEYS = (
    Key("ssl.keystore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM")),
    Key("ssl.keystore.location", "string", None),
    Key("ssl.keystore.password", "password", None),
    Key("ssl.key.password", "password", None),
    Key("ssl.keystore.certificate.chain", "password", None),
    Key("ssl.keystore.key", "password", None),
    Key("ssl.truststore.type", "string", "JKS", one_of("JKS", "PKCS12", "PEM")),
    Key("ssl.truststore.location", "string", None),
    Key("ssl.truststore.password", "password", None),
    Key("ssl.truststore.certificates", "password", None),
    Key("ssl.enabled.protocols", "list", ["TLSv1.2", "TLSv1.3"]),
    Key("ssl.protocol", "string", "TLSv1.3"),
    Key("ssl.cipher.suites", "list", []),
    Key("ssl.endpoint.identification.algorithm", "string", "https"),
)
