"""`samsa schema-registry` reaching its broker over SASL_SSL (SCRAM-SHA-512, a test CA) with the
registry's ``kafkastore.security.protocol`` / ``kafkastore.ssl.*`` / ``kafkastore.sasl.*`` keys."""

from __future__ import annotations

import json

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from registry_process import RegistryProcess
from samsa.client.admin import Admin
from samsa.embedded import Broker


def test_registry_over_sasl_ssl(certs, tmp_path):
    with Broker({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
                 "ssl.keystore.type": "PEM", "ssl.keystore.certificate.chain": certs.cert("broker").read_text(),
                 "ssl.keystore.key": certs.key("broker").read_text(),
                 "sasl.enabled.mechanisms": "SCRAM-SHA-512"}) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap_servers_of("PLAINTEXT")}) as admin:
            admin.alter_user_scram_credentials([("registry", "SCRAM-SHA-512", 8192, "registry-secret")])
        registry = RegistryProcess(tmp_path, broker.bootstrap_servers_of("SASL_SSL"), **{
            "schema.registry.group.session.timeout.ms": "10000",
            "kafkastore.security.protocol": "SASL_SSL", "kafkastore.ssl.truststore.type": "PEM",
            "kafkastore.ssl.truststore.location": str(certs.ca), "kafkastore.sasl.mechanism": "SCRAM-SHA-512",
            "kafkastore.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                           'username="registry" password="registry-secret";'})
        registry.start()
        try:
            sr = SchemaRegistryClient({"url": registry.url})
            schema = Schema(json.dumps({"type": "record", "name": "S", "fields": [{"name": "a", "type": "int"}]}))
            schema_id = sr.register_schema("secured-value", schema)
            assert sr.get_schema(schema_id).schema_str == schema.schema_str.replace(" ", "")
            with Admin({"bootstrap.servers": broker.bootstrap_servers_of("PLAINTEXT")}) as admin:
                assert "_schemas" in admin.list_topics(include_internal=True)
        finally:
            registry.stop()
