"""Four real clients over SSL (with and without client certificates), SASL_PLAINTEXT/PLAIN and
SASL_SSL/SCRAM-SHA-512; bad credentials and bad transports get a clear error, one log line
with the client's address, and the broker keeps serving."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from waiting import wait_until

MODES = ("ssl", "ssl-cert", "sasl-plain", "sasl-ssl-scram")


@pytest.fixture(scope="module")
def scram_users(secure_broker):
    admin = AdminClient({"bootstrap.servers": secure_broker.bootstrap})
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), b"alice-scram"),
        UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"alice-scram"),
    ])
    for f in futures.values():
        f.result(15)
    return secure_broker


def librdkafka_conf(broker, certs, mode: str, user: str = "alice", password: str | None = None) -> dict:
    p = broker.ports
    if mode == "ssl":
        return {"bootstrap.servers": f"127.0.0.1:{p['SSL']}", "security.protocol": "SSL", "ssl.ca.location": str(certs.ca)}
    if mode == "ssl-cert":
        return {"bootstrap.servers": f"127.0.0.1:{p['MTLS']}", "security.protocol": "SSL",
                "ssl.ca.location": str(certs.ca), "ssl.certificate.location": str(certs.cert(user)),
                "ssl.key.location": str(certs.key(user))}
    if mode == "sasl-plain":
        return {"bootstrap.servers": f"127.0.0.1:{p['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": password or f"{user}-secret"}
    return {"bootstrap.servers": f"127.0.0.1:{p['SASL_SSL']}", "security.protocol": "SASL_SSL",
            "ssl.ca.location": str(certs.ca), "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user,
            "sasl.password": password or f"{user}-scram"}


def _confluent(conf: dict, topic: str, value: bytes) -> list[bytes]:
    p = Producer({**conf, "message.timeout.ms": 15000})
    errs = []
    p.produce(topic, value, on_delivery=lambda e, m: errs.append(e))
    assert p.flush(20) == 0 and errs == [None], errs
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    try:
        m = wait_until(lambda: (lambda m: m if m is not None and not m.error() else None)(c.poll(0.5)),
                       "a record back", 30)
        return [m.value()]
    finally:
        c.close()


def _kcat(conf: dict, topic: str, value: bytes) -> list[bytes]:
    args = [x for k, v in conf.items() if k != "bootstrap.servers" for x in ("-X", f"{k}={v}")]
    base = ["kcat", "-b", conf["bootstrap.servers"], *args]
    r = subprocess.run([*base, "-P", "-t", topic], input=value + b"\n", timeout=30, capture_output=True)
    assert r.returncode == 0, r.stderr.decode()
    out = subprocess.run([*base, "-C", "-t", topic, "-o", "beginning", "-c", "1", "-e"], check=True, timeout=30,
                         capture_output=True)
    return [out.stdout.rstrip(b"\n")]


def _kafka_python_conf(broker, certs, mode: str) -> dict:
    conf = librdkafka_conf(broker, certs, mode)
    out = {"bootstrap_servers": conf["bootstrap.servers"], "security_protocol": conf["security.protocol"]}
    if "ssl.ca.location" in conf:
        out.update(ssl_cafile=str(certs.ca), ssl_check_hostname=True)
    if mode == "ssl-cert":
        out.update(ssl_certfile=str(certs.cert("alice")), ssl_keyfile=str(certs.key("alice")))
    if mode.startswith("sasl"):
        out.update(sasl_mechanism=conf["sasl.mechanism"], sasl_plain_username=conf["sasl.username"],
                   sasl_plain_password=conf["sasl.password"])
    return out


def _kafka_python(broker, certs, mode: str, topic: str, value: bytes) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer
    conf = _kafka_python_conf(broker, certs, mode)
    p = KafkaProducer(**conf)
    p.send(topic, value).get(30)
    p.close()
    c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=20000, group_id=None, **conf)
    try:
        return [next(iter(c)).value]
    finally:
        c.close()


def _aiokafka(broker, certs, mode: str, topic: str, value: bytes) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka.helpers import create_ssl_context
    conf = _kafka_python_conf(broker, certs, mode)
    kw = {"bootstrap_servers": conf["bootstrap_servers"], "security_protocol": conf["security_protocol"]}
    if "ssl_cafile" in conf:
        kw["ssl_context"] = create_ssl_context(cafile=conf["ssl_cafile"], certfile=conf.get("ssl_certfile"),
                                               keyfile=conf.get("ssl_keyfile"))
    for k in ("sasl_mechanism", "sasl_plain_username", "sasl_plain_password"):
        if k in conf:
            kw[k] = conf[k]

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(**kw)
        await p.start()
        try:
            await p.send_and_wait(topic, value)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **kw)
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 30)
            return [m.value]
        finally:
            await c.stop()
    return asyncio.run(run())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("client", ["confluent", "kcat", "kafka-python", "aiokafka"])
def test_produce_and_consume(scram_users, certs, client, mode):
    broker = scram_users
    topic = f"sec-{client}-{mode}-{uuid.uuid4().hex[:6]}"
    value = f"{client} over {mode}".encode()
    if client == "confluent":
        got = _confluent(librdkafka_conf(broker, certs, mode), topic, value)
    elif client == "kcat":
        got = _kcat(librdkafka_conf(broker, certs, mode), topic, value)
    elif client == "kafka-python":
        got = _kafka_python(broker, certs, mode, topic, value)
    else:
        got = _aiokafka(broker, certs, mode, topic, value)
    assert got == [value]


def _refused(conf: dict) -> str:
    errs: list = []
    p = Producer({**conf, "error_cb": lambda e: errs.append(e), "message.timeout.ms": 5000})
    p.produce("never", b"x")
    p.flush(6)
    assert errs, "the client saw no error"
    return str(errs[0])


def _plaintext_still_served(broker) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    errs = []
    p.produce(f"still-{uuid.uuid4().hex[:6]}", b"ok", on_delivery=lambda e, m: errs.append(e))
    assert p.flush(20) == 0 and errs == [None]


@pytest.mark.parametrize("case", ["wrong-password", "unknown-user", "no-client-cert", "plaintext-on-tls",
                                  "scram-wrong-password"])
def test_bad_clients_are_refused_and_logged(scram_users, certs, case):
    broker = scram_users
    before = broker.log_text().count("Failed authentication with /127.0.0.1")
    if case == "wrong-password":
        started = time.monotonic()
        msg = _refused(librdkafka_conf(broker, certs, "sasl-plain", password="wrong"))
        assert "Invalid username or password" in msg
        # KIP-306: each failure is answered after connection.failed.authentication.delay.ms (100 ms),
        # so the retrying client makes at most one attempt per 100 ms (it made ~20 per 100 ms before).
        attempts = broker.log_text().count("Failed authentication with /127.0.0.1") - before
        print(f"wrong password: {attempts} attempts in {time.monotonic() - started:.1f} s")
        assert 1 <= attempts <= (time.monotonic() - started) / 0.1 + 1
    elif case == "unknown-user":
        msg = _refused(librdkafka_conf(broker, certs, "sasl-plain", user="mallory", password="x"))
        assert "Invalid username or password" in msg
    elif case == "scram-wrong-password":
        msg = _refused(librdkafka_conf(broker, certs, "sasl-ssl-scram", password="wrong"))
        assert "invalid credentials" in msg
    elif case == "no-client-cert":
        _refused({"bootstrap.servers": f"127.0.0.1:{broker.ports['MTLS']}", "security.protocol": "SSL",
                  "ssl.ca.location": str(certs.ca)})
    else:
        _refused({"bootstrap.servers": f"127.0.0.1:{broker.ports['SSL']}"})
    wait_until(lambda: broker.log_text().count("Failed authentication with /127.0.0.1") > before,
               "the broker's log line naming the client", 15)
    _plaintext_still_served(broker)


def test_samsa_clients_over_every_protocol(scram_users, certs):
    from samsa.client.consumer import Consumer as SamsaConsumer
    from samsa.client.producer import Producer as SamsaProducer
    p = scram_users.ports
    jaas = 'org.apache.kafka.common.security.{m} required username="alice" password="{pw}";'
    confs = {
        "ssl": {"bootstrap.servers": f"127.0.0.1:{p['SSL']}", "security.protocol": "SSL",
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca)},
        "mtls-pkcs12": {"bootstrap.servers": f"127.0.0.1:{p['MTLS']}", "security.protocol": "SSL",
                        "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
                        "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(certs.p12("alice")),
                        "ssl.keystore.password": "test-store-pw"},
        "sasl-plain": {"bootstrap.servers": f"127.0.0.1:{p['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
                       "sasl.mechanism": "PLAIN",
                       "sasl.jaas.config": jaas.format(m="plain.PlainLoginModule", pw="alice-secret")},
        "sasl-ssl-scram256": {"bootstrap.servers": f"127.0.0.1:{p['SASL_SSL']}", "security.protocol": "SASL_SSL",
                              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
                              "sasl.mechanism": "SCRAM-SHA-256",
                              "sasl.jaas.config": jaas.format(m="scram.ScramLoginModule", pw="alice-scram")},
    }
    for name, conf in confs.items():
        topic = f"samsa-{name}-{uuid.uuid4().hex[:6]}"
        with SamsaProducer({**conf}) as producer:
            producer.send(topic, value=name.encode()).result(30)
        with SamsaConsumer({**conf, "auto.offset.reset": "earliest"}) as consumer:
            from samsa.client.types import TopicPartition
            consumer.assign([TopicPartition(topic, 0)])
            consumer.seek_to_beginning()
            got = wait_until(lambda: [r.value for r in consumer.poll(0.5)], f"a record over {name}", 30)
        assert got == [name.encode()], name


def test_scram_credentials_never_in_clear(scram_users):
    broker = scram_users
    store = (broker.data_dir / "logs" / "samsa-cluster-metadata.json").read_text()
    assert "alice-scram" not in store
    users = json.loads(store)["entity_configs"]["users/alice"]
    assert users["SCRAM-SHA-512"].startswith("salt=") and "iterations=8192" in users["SCRAM-SHA-512"]
    assert "alice-scram" not in broker.log_text()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    described = admin.describe_user_scram_credentials(["alice"])["alice"].result(15)
    infos = {(i.mechanism, i.iterations) for i in described.scram_credential_infos}
    assert infos == {(ScramMechanism.SCRAM_SHA_512, 8192), (ScramMechanism.SCRAM_SHA_256, 4096)}


def test_unknown_mechanism_is_refused(scram_users):
    conf = {"bootstrap.servers": f"127.0.0.1:{scram_users.ports['SASL_PLAINTEXT']}",
            "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
            "enable.sasl.oauthbearer.unsecure.jwt": True, "sasl.oauthbearer.config": "principal=alice"}
    with pytest.raises(Exception):
        msg = _refused(conf)
        raise KafkaException(msg)
