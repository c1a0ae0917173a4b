"""The ``samsa`` sink and source over SASL_SSL with SCRAM-SHA-512, configured as Spark users
configure Spark's Kafka source: ``kafka.security.protocol``, ``kafka.sasl.*``, ``kafka.ssl.*``."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from samsa.client.admin import Admin
from samsa.embedded import Broker
from sec_certs import PASSWORD, make_certs
from spark_helpers import create_topic


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    certs = make_certs(tmp_path_factory.mktemp("certs"), clients=())
    with Broker({"listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0", "num.partitions": 1,
                 "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.p12("broker")),
                 "ssl.keystore.password": PASSWORD, "sasl.enabled.mechanisms": "SCRAM-SHA-512"}) as broker:
        with Admin({"bootstrap.servers": broker.bootstrap_servers_of("PLAINTEXT")}) as admin:
            admin.alter_user_scram_credentials([("etl", "SCRAM-SHA-512", 4096, "etl-secret")])
            create_topic(admin, "secured-events", 2)
        yield broker, certs


def test_write_and_read_over_sasl_ssl_scram(spark, secured):
    broker, certs = secured
    options = {
        "kafka.bootstrap.servers": broker.bootstrap_servers_of("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="etl" password="etl-secret";',
        "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.location": str(certs.truststore_p12),
        "kafka.ssl.truststore.password": PASSWORD,
    }
    rows = spark.range(50).select(F.col("id").cast("string").alias("key"),
                                  F.concat(F.lit("event-"), F.col("id").cast("string")).alias("value"))
    rows.write.format("samsa").options(**options).option("topic", "secured-events").mode("append").save()
    back = spark.read.format("samsa").options(**options).option("subscribe", "secured-events") \
        .option("startingOffsets", "earliest").load() \
        .select(F.col("key").cast("string"), F.col("value").cast("string")).collect()
    assert sorted((r.key, r.value) for r in back) == sorted((str(i), f"event-{i}") for i in range(50))
