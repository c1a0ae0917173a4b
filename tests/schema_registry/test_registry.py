"""``samsa schema-registry`` processes on a Samsa broker, driven by confluent-kafka's
SchemaRegistryClient and serializers, and by Samsa's own serdes (tests/README: real clients)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from broker_process import ROOT, BrokerProcess
from registry_process import BROKER_OVERRIDES, RegistryProcess
from waiting import wait_until

USER_V1 = {"type": "record", "name": "User", "namespace": "samsa.test",
           "fields": [{"name": "name", "type": "string"}, {"name": "visits", "type": "int"}]}
USER_V2 = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "email", "type": ["null", "string"], "default": None}]}
USER_BAD = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "age", "type": "int"}]}  # no default: not BACKWARD


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("registry")
    broker = BrokerProcess(base / "broker", **BROKER_OVERRIDES).start()
    regs = [RegistryProcess(base, broker.bootstrap).launch() for _ in range(2)]
    try:
        for r in regs:
            r.wait()
        wait_until(lambda: sum(r.is_writer() for r in regs) == 1, "one registry elected to write", 60)
        yield broker, regs
    finally:
        for r in regs:
            r.stop()
        broker.stop()


@pytest.fixture
def sr(cluster):
    return SchemaRegistryClient({"url": cluster[1][0].url})


def _topic(name: str) -> str:
    return f"{name}-{os.getpid()}"


def _produce(broker, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap})
    for v in values:
        p.produce(topic, value=v)
    assert p.flush(30) == 0


_groups = itertools.count()


def _consume(broker, topic: str, n: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{topic}-{next(_groups)}",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    out: list[bytes] = []
    try:
        wait_until(lambda: (out.extend(m.value() for m in c.consume(10, 0.5) if not m.error()) or len(out) >= n),
                   f"{n} records of {topic}", 60)
    finally:
        c.close()
    return out


def test_avro_register_produce_consume_evolve_and_refuse(cluster, sr):
    broker, regs = cluster
    topic = _topic("users")
    ser = AvroSerializer(sr, json.dumps(USER_V1))
    ctx = SerializationContext(topic, MessageField.VALUE)
    _produce(broker, topic, [ser({"name": "ada", "visits": 3}, ctx)])
    assert sr.get_latest_version(f"{topic}-value").version == 1
    # a compatible evolution: a new version of the same subject, old records still readable
    ser2 = AvroSerializer(sr, json.dumps(USER_V2))
    _produce(broker, topic, [ser2({"name": "bob", "visits": 1, "email": "b@x"}, ctx)])
    assert sr.get_versions(f"{topic}-value") == [1, 2]
    de = AvroDeserializer(sr)
    got = [de(v, ctx) for v in _consume(broker, topic, 2)]
    assert got == [{"name": "ada", "visits": 3}, {"name": "bob", "visits": 1, "email": "b@x"}]
    # read with the new schema: the old record gets the default
    de2 = AvroDeserializer(sr, json.dumps(USER_V2))
    assert de2(_consume(broker, topic, 1)[0], ctx) == {"name": "ada", "visits": 3, "email": None}
    # an incompatible change under BACKWARD (the default): 409
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(f"{topic}-value", Schema(json.dumps(USER_BAD), "AVRO"))
    assert e.value.http_status_code == 409 and e.value.error_code == 409
    assert not sr.test_compatibility(f"{topic}-value", Schema(json.dumps(USER_BAD), "AVRO"))
    assert sr.test_compatibility(f"{topic}-value", Schema(json.dumps(USER_V2), "AVRO"))
    # the same schema under another subject keeps its id; lookups find it
    same = sr.register_schema(f"{topic}-other-value", Schema(json.dumps(USER_V1), "AVRO"))
    assert same == sr.get_version(f"{topic}-value", 1).schema_id
    assert sr.lookup_schema(f"{topic}-value", Schema(json.dumps(USER_V2), "AVRO")).version == 2
    status, versions = regs[0].request("GET", f"/schemas/ids/{same}/versions")
    assert status == 200 and {"subject": f"{topic}-value", "version": 1} in versions
    # schemas by id, with its type
    assert regs[1].request("GET", f"/schemas/ids/{same}")[1]["schema"] == json.dumps(USER_V1, separators=(",", ":"))
    assert sorted(sr.get_schema_types()) == ["AVRO", "JSON", "PROTOBUF"]


def test_config_levels_and_modes(cluster, sr):
    _, regs = cluster
    subject = _topic("cfg") + "-value"
    sr.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    assert sr.get_compatibility() == "BACKWARD"
    sr.set_compatibility(subject, "NONE")
    assert sr.get_compatibility(subject) == "NONE"
    sr.register_schema(subject, Schema(json.dumps(USER_BAD), "AVRO"))  # NONE: anything goes
    sr.set_compatibility(subject, "FORWARD_TRANSITIVE")
    assert regs[1].request("GET", f"/config/{subject}")[1] == {"compatibilityLevel": "FORWARD_TRANSITIVE"}
    # FORWARD: old schemas must read new data; dropping 'age' (no default in the reader) is not
    dropped = {**USER_V1, "fields": USER_V1["fields"][:1]}
    assert not sr.test_compatibility(subject, Schema(json.dumps(dropped), "AVRO"))
    status, body = regs[0].request("PUT", f"/config/{subject}", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    assert regs[0].request("DELETE", f"/config/{subject}")[1] == {"compatibilityLevel": "FORWARD_TRANSITIVE"}
    assert regs[0].request("GET", f"/config/{subject}")[0] == 404
    # READONLY refuses writes (42205), READWRITE again allows them
    assert sr.update_mode(subject, "READONLY") == "READONLY"
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))
    assert e.value.error_code == 42205
    sr.update_mode(subject, "READWRITE")
    # IMPORT: ids given by the caller (an empty subject)
    imported = _topic("imported") + "-value"
    assert regs[1].request("PUT", f"/mode/{imported}", {"mode": "IMPORT"}) == (200, {"mode": "IMPORT"})
    status, body = regs[1].request("POST", f"/subjects/{imported}/versions",
                                   {"schema": json.dumps(USER_V2), "id": 7000, "version": 3})
    assert status == 200 and body["id"] == 7000
    assert sr.get_version(imported, 3).schema_id == 7000
    status, body = regs[0].request("POST", f"/subjects/{subject}/versions", {"schema": json.dumps(USER_V2), "id": 7001})
    assert (status, body["error_code"]) == (422, 42205)   # not in IMPORT mode
    assert regs[0].request("PUT", "/mode", {"mode": "WRITEONLY"})[1]["error_code"] == 42204


def test_soft_then_permanent_delete(cluster, sr):
    _, regs = cluster
    subject = _topic("del") + "-value"
    sr.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    sr.register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))
    status, body = regs[0].request("DELETE", f"/subjects/{subject}?permanent=true")
    assert (status, body["error_code"]) == (404, 40405)            # not soft-deleted first
    assert sr.delete_version(subject, 2) == 2
    assert sr.get_versions(subject) == [1]
    assert regs[1].request("GET", f"/subjects/{subject}/versions?deleted=true")[1] == [1, 2]
    assert sr.delete_subject(subject) == [1]
    assert subject not in sr.get_subjects()
    assert regs[0].request("GET", f"/subjects/{subject}/versions")[1]["error_code"] == 40401
    assert subject in regs[0].request("GET", "/subjects?deleted=true")[1]
    assert regs[0].request("DELETE", f"/subjects/{subject}")[1]["error_code"] == 40404   # already soft-deleted
    assert sorted(sr.delete_subject(subject, permanent=True)) == [1, 2]
    assert subject not in regs[1].request("GET", "/subjects?deleted=true")[1]
    assert regs[0].request("GET", f"/subjects/{subject}/versions/1?deleted=true")[1]["error_code"] == 40401


def test_references(cluster, sr):
    _, regs = cluster
    topic = _topic("orders")
    address = {"type": "record", "name": "Address", "namespace": "samsa.test",
               "fields": [{"name": "city", "type": "string"}]}
    order = {"type": "record", "name": "Order", "namespace": "samsa.test",
             "fields": [{"name": "id", "type": "long"}, {"name": "ship_to", "type": "samsa.test.Address"}]}
    sr.register_schema(f"{topic}-address", Schema(json.dumps(address), "AVRO"))
    refs = [SchemaReference("samsa.test.Address", f"{topic}-address", 1)]
    order_id = sr.register_schema(f"{topic}-value", Schema(json.dumps(order), "AVRO", refs))
    got = sr.get_schema(order_id)
    assert [r.subject for r in got.references] == [f"{topic}-address"]
    assert regs[1].request("GET", f"/subjects/{topic}-address/versions/1/referencedby")[1] == [order_id]
    # a referenced version cannot be deleted (42206)
    status, body = regs[0].request("DELETE", f"/subjects/{topic}-address/versions/1")
    assert (status, body["error_code"]) == (422, 42206)
    # a reference to nothing is an invalid schema
    bad = [SchemaReference("samsa.test.Nope", "no-such-subject", 1)]
    with pytest.raises(SchemaRegistryError) as e:
        sr.register_schema(f"{topic}-bad", Schema(json.dumps(order), "AVRO", bad))
    assert e.value.error_code == 42201
    # records with the referencing schema round-trip through confluent-kafka's serdes
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = AvroSerializer(sr, Schema(json.dumps(order), "AVRO", refs), conf={"auto.register.schemas": False})
    data = ser({"id": 5, "ship_to": {"city": "Prague"}}, ctx)
    assert AvroDeserializer(sr)(data, ctx) == {"id": 5, "ship_to": {"city": "Prague"}}


def test_json_schema_and_protobuf_serializers(cluster, sr):
    broker, regs = cluster
    topic = _topic("events")
    schema = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
              "properties": {"kind": {"type": "string"}, "n": {"type": "integer"}}, "required": ["kind"]}
    ctx = SerializationContext(topic, MessageField.VALUE)
    ser = JSONSerializer(json.dumps(schema), sr)
    _produce(broker, topic, [ser({"kind": "click", "n": 2}, ctx)])
    de = JSONDeserializer(json.dumps(schema), schema_registry_client=sr)
    assert de(_consume(broker, topic, 1)[0], ctx) == {"kind": "click", "n": 2}
    assert sr.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"
    # JSON compatibility: making a new property required breaks BACKWARD
    stricter = {**schema, "required": ["kind", "n"]}
    assert not sr.test_compatibility(f"{topic}-value", Schema(json.dumps(stricter), "JSON"))

    from tests_protobuf import message_class
    Reading = message_class()
    ptopic = _topic("readings")
    pctx = SerializationContext(ptopic, MessageField.VALUE)
    pser = ProtobufSerializer(Reading, sr, {"use.deprecated.format": False})
    _produce(broker, ptopic, [pser(Reading(sensor="t1", value=21), pctx)])
    pde = ProtobufDeserializer(Reading, {"use.deprecated.format": False})
    assert pde(_consume(broker, ptopic, 1)[0], pctx) == Reading(sensor="t1", value=21)
    latest = sr.get_latest_version(f"{ptopic}-value")
    assert latest.schema.schema_type == "PROTOBUF"
    # Protobuf compatibility: a field's type changed from int64 to string is refused
    changed = message_class(value_type="string")
    with pytest.raises(SchemaRegistryError) as e:
        ProtobufSerializer(changed, sr, {"use.deprecated.format": False})(changed(sensor="t", value="x"), pctx)
    assert "409" in str(e.value) or getattr(e.value, "error_code", 0) == 409


def test_bad_input_gets_error_json_and_service_serves_on(cluster, sr):
    _, regs = cluster
    r = regs[0]
    subject = _topic("bad") + "-value"
    cases = [
        (r.request("POST", f"/subjects/{subject}/versions", {"schema": "{not json"}), 422, 42201),
        (r.request("POST", f"/subjects/{subject}/versions", {"schema": '{"type":"record","name":"x"}'}), 422, 42201),
        (r.request("POST", f"/subjects/{subject}/versions", {"schema": '{"type":"nope"}', "schemaType": "JSON"}),
         422, 42201),
        (r.request("POST", f"/subjects/{subject}/versions", {"schema": "message {", "schemaType": "PROTOBUF"}),
         422, 42201),
        (r.request("POST", f"/subjects/{subject}/versions", {"schema": "{}", "schemaType": "XML"}), 422, 42201),
        (r.request("GET", "/subjects/no-such-subject/versions"), 404, 40401),
        (r.request("GET", "/schemas/ids/987654"), 404, 40403),
        (r.request("GET", "/subjects/no-such-subject/versions/banana"), 422, 42202),
        (r.request("POST", f"/subjects/{subject}/versions", raw=b"schema=x", content_type="text/plain"), 415, 415),
        (r.request("POST", f"/subjects/{subject}/versions", raw=b"{oops"), 400, 400),
        (r.request("GET", "/no/such/path"), 404, 404),
    ]
    for (status, body), want_status, want_code in cases:
        assert (status, (body or {}).get("error_code")) == (want_status, want_code), (status, body)
        assert isinstance(body["message"], str) and body["message"]
    sr.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    assert r.request("GET", f"/subjects/{subject}/versions/2")[1]["error_code"] == 40402
    assert r.request("GET", f"/subjects/{subject}/versions/latest")[1]["version"] == 1
    assert regs[1].request("GET", "/subjects")[0] == 200


def test_samsa_serdes_and_confluent_read_each_other(cluster, sr):
    from samsa.serialization.avro import KafkaAvroDeserializer, KafkaAvroSerializer
    from samsa.serialization.json_schema import KafkaJsonSchemaDeserializer, KafkaJsonSchemaSerializer
    from samsa.serialization.protobuf import KafkaProtobufDeserializer, KafkaProtobufSerializer
    from tests_protobuf import message_class
    import samsa
    broker, regs = cluster
    topic = _topic("mixed")
    conf = {"bootstrap.servers": broker.bootstrap, "schema.registry.url": regs[1].url,
            "value.serializer": "samsa.serialization.avro.KafkaAvroSerializer",
            "value.schema": json.dumps(USER_V1)}
    with samsa.Producer(conf) as p:
        p.send(topic, {"name": "samsa", "visits": 9}).result()
    ctx = SerializationContext(topic, MessageField.VALUE)
    _produce(broker, topic, [AvroSerializer(sr, json.dumps(USER_V1))({"name": "confluent", "visits": 1}, ctx)])
    raw = _consume(broker, topic, 2)
    confluent_de = AvroDeserializer(sr)
    samsa_de = KafkaAvroDeserializer(conf={"schema.registry.url": regs[0].url})
    assert [confluent_de(v, ctx) for v in raw] == [samsa_de.deserialize(topic, v) for v in raw] == [
        {"name": "samsa", "visits": 9}, {"name": "confluent", "visits": 1}]
    # RecordNameStrategy: the subject is the record's full name
    rn = KafkaAvroSerializer(USER_V2, {"schema.registry.url": regs[0].url,
                                       "value.subject.name.strategy":
                                           "io.confluent.kafka.serializers.subject.RecordNameStrategy"})
    rn.serialize(topic, {"name": "x", "visits": 0, "email": None})
    assert "samsa.test.User" in sr.get_subjects()
    trn = KafkaAvroSerializer(USER_V2, {"schema.registry.url": regs[0].url, "auto.register.schemas": "true",
                                        "value.subject.name.strategy": "TopicRecordNameStrategy"})
    trn.serialize(topic, {"name": "x", "visits": 0, "email": None})
    assert f"{topic}-samsa.test.User" in sr.get_subjects()
    latest = KafkaAvroSerializer(conf={"schema.registry.url": regs[0].url, "use.latest.version": True,
                                       "auto.register.schemas": False})
    assert confluent_de(latest.serialize(topic, {"name": "l", "visits": 2}), ctx) == {"name": "l", "visits": 2}
    # JSON Schema both ways
    schema = {"type": "object", "title": "Ping", "properties": {"at": {"type": "integer"}}}
    js = KafkaJsonSchemaSerializer(schema, {"schema.registry.url": regs[0].url})
    jtopic = _topic("mixed-json")
    jctx = SerializationContext(jtopic, MessageField.VALUE)
    assert JSONDeserializer(json.dumps(schema))(js.serialize(jtopic, {"at": 5}), jctx) == {"at": 5}
    other = JSONSerializer(json.dumps(schema), sr)({"at": 6}, jctx)
    assert KafkaJsonSchemaDeserializer(conf={"schema.registry.url": regs[0].url}).deserialize(jtopic, other) == {"at": 6}
    # Protobuf both ways (the samsa deserializer builds the class from the registry's schema)
    Reading = message_class()
    ptopic = _topic("mixed-proto")
    pctx = SerializationContext(ptopic, MessageField.VALUE)
    mine = KafkaProtobufSerializer(conf={"schema.registry.url": regs[0].url}).serialize(ptopic, Reading(sensor="a",
                                                                                                       value=1))
    assert ProtobufDeserializer(Reading, {"use.deprecated.format": False})(mine, pctx) == Reading(sensor="a", value=1)
    theirs = ProtobufSerializer(Reading, sr, {"use.deprecated.format": False})(Reading(sensor="b", value=2), pctx)
    got = KafkaProtobufDeserializer(conf={"schema.registry.url": regs[0].url}).deserialize(ptopic, theirs)
    assert (got.sensor, got.value) == ("b", 2)


def test_connect_converters_round_trip_and_read_by_confluent(cluster, sr):
    from samsa.connect.converters import AvroConverter, JsonSchemaConverter
    from samsa.connect.data import Field, Schema as ConnectSchema
    _, regs = cluster
    topic = _topic("connect")
    schema = ConnectSchema("struct", False, "samsa.test.Row", fields=[
        Field("id", ConnectSchema("int64")), Field("small", ConnectSchema("int16")),
        Field("name", ConnectSchema("string", True)), Field("blob", ConnectSchema("bytes", True)),
        Field("tags", ConnectSchema("array", True, items=ConnectSchema("string"))),
        Field("price", ConnectSchema("bytes", True, "org.apache.kafka.connect.data.Decimal", 1,
                                     parameters={"scale": "2"}))])
    row = {"id": 7, "small": 3, "name": None, "blob": b"\x00\x01", "tags": ["a", "b"], "price": (1250).to_bytes(2, "big")}
    ctx = SerializationContext(topic, MessageField.VALUE)
    avro = AvroConverter()
    avro.configure({"schema.registry.url": regs[0].url}, False)
    data = avro.from_connect_data(topic, schema, row)
    assert avro.to_connect_data(topic, data) == (schema, row)
    import decimal
    assert AvroDeserializer(sr)(data, ctx)["price"] == decimal.Decimal("12.50")
    js = JsonSchemaConverter()
    js.configure({"schema.registry.url": regs[1].url}, False)
    data = js.from_connect_data(topic + "-json", schema, row)
    got_schema, got = js.to_connect_data(topic + "-json", data)
    assert got == row and [f.name for f in got_schema.fields] == [f.name for f in schema.fields]
    jctx = SerializationContext(topic + "-json", MessageField.VALUE)
    assert JSONDeserializer(None, schema_registry_client=sr)(data, jctx)["id"] == 7


def test_web_console_shows_subjects_versions_and_metrics(cluster, sr):
    import urllib.error
    import urllib.request

    from broker_process import free_port, wait_for_port
    broker, regs = cluster
    subject = _topic("console-page") + "-value"
    sr.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    sr.register_schema(subject, Schema(json.dumps(USER_V2), "AVRO"))

    def get(url: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
    port, other, dead = free_port(), free_port(), free_port()
    consoles = [subprocess.Popen([sys.executable, "-m", "samsa.cli.main", "console", "--bootstrap-server",
                                  broker.bootstrap, "--port", str(p), "--schema-registry-url", url],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
                for p, url in ((port, regs[0].url), (other, f"http://127.0.0.1:{dead}"))]
    try:
        for p, proc in zip((port, other), consoles):
            wait_for_port(p, proc)
        status, page = get(f"http://127.0.0.1:{port}/schemas")
        assert status == 200 and subject in page and 'href="/schemas"' in page
        status, page = get(f"http://127.0.0.1:{port}/schemas/{subject}?version=1")
        assert status == 200 and "Version 1" in page and "visits" in page and "email" not in page
        status, page = get(f"http://127.0.0.1:{port}/schemas/{subject}")
        assert status == 200 and "Version 2" in page and "email" in page
        status, page = get(f"http://127.0.0.1:{port}/schemas/no-such-subject")
        assert status == 404 and "Subject &#39;no-such-subject&#39; not found." in page
        status, page = get(f"http://127.0.0.1:{other}/schemas")
        assert status == 503 and "unreachable" in page
    finally:
        for proc in consoles:
            proc.terminate()
            proc.wait(15)
    # the registry's metrics
    status, text = get(regs[0].url + "/metrics")
    assert status == 200 and "kafka_schema_registry_registered_count" in text
    assert "kafka_schema_registry_master_slave_role" in text


def _samsa(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "samsa.cli.main", *args], input=stdin, capture_output=True,
                          text=True, timeout=120, cwd=ROOT)


def test_avro_console_producer_and_consumer(cluster, sr):
    broker, regs = cluster
    topic = _topic("console-avro")
    schema = json.dumps(USER_V2)
    lines = '{"name": "ada", "visits": 1, "email": {"string": "a@x"}}\n{"name": "bob", "visits": 2, "email": null}\n'
    done = _samsa("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                  "--property", f"schema.registry.url={regs[1].url}", "--property", f"value.schema={schema}",
                  stdin=lines)
    assert done.returncode == 0, done.stderr
    # what confluent-kafka reads
    ctx = SerializationContext(topic, MessageField.VALUE)
    assert [AvroDeserializer(sr)(v, ctx)["name"] for v in _consume(broker, topic, 2)] == ["ada", "bob"]
    # what the Avro console consumer prints: Avro's JSON encoding
    out = _samsa("console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", topic, "--from-beginning",
                 "--max-messages", "2", "--formatter", "io.confluent.kafka.formatter.AvroMessageFormatter",
                 "--property", f"schema.registry.url={regs[0].url}", "--property", "print.schema.ids=true")
    assert out.returncode == 0, out.stderr
    sid = sr.get_latest_version(f"{topic}-value").schema_id
    assert [json.loads(line.split("\t")[0]) for line in out.stdout.splitlines()] == [
        {"name": "ada", "visits": 1, "email": {"string": "a@x"}}, {"name": "bob", "visits": 2, "email": None}]
    assert all(line.endswith(f"\t{sid}") for line in out.stdout.splitlines())
    # a line that is not a datum of the schema: one clear line, non-zero exit
    bad = _samsa("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                 "--property", f"schema.registry.url={regs[1].url}", "--property", f"value.schema={schema}",
                 stdin='{"name": 5}\n')
    assert bad.returncode != 0 and bad.stderr.strip().startswith("ERROR"), bad.stderr
    # an incompatible schema: the registry's 409 in that line
    bad = _samsa("console-producer", "--bootstrap-server", broker.bootstrap, "--topic", topic,
                 "--property", f"schema.registry.url={regs[1].url}", "--property", f"value.schema={json.dumps(USER_BAD)}",
                 stdin='{"name": "x", "visits": 1, "age": 3}\n')
    assert bad.returncode != 0 and "409" in bad.stderr, bad.stderr


def test_two_registries_share_forward_fail_over_and_restart(cluster, sr, tmp_path):
    broker, regs = cluster
    writer = next(r for r in regs if r.is_writer())
    follower = next(r for r in regs if r is not writer)
    # registered through the follower (forwarded to the writer), readable through both
    subject = _topic("shared") + "-value"
    fsr = SchemaRegistryClient({"url": follower.url})
    sid = fsr.register_schema(subject, Schema(json.dumps(USER_V1), "AVRO"))
    for r in regs:
        assert r.request("GET", f"/schemas/ids/{sid}")[0] == 200
    before = {s: SchemaRegistryClient({"url": writer.url}).get_latest_version(s).schema_id
              for s in SchemaRegistryClient({"url": writer.url}).get_subjects()}
    # kill the writer: the other is elected and takes the writes
    writer.kill()
    wait_until(follower.is_writer, "the surviving registry elected to write", 30)
    v3 = {**USER_V2, "fields": USER_V2["fields"] + [{"name": "note", "type": "string", "default": ""}]}
    sid2 = fsr.register_schema(subject, Schema(json.dumps(v3), "AVRO"))
    assert sid2 > max(before.values())   # a new id: the new writer read every id before writing
    # a restarted registry reads every id back from _schemas
    again = RegistryProcess(tmp_path, broker.bootstrap).start()
    regs.append(again)
    asr = SchemaRegistryClient({"url": again.url})
    wait_until(lambda: asr.get_schema(sid2), "the restarted registry serving", 30)
    for s, schema_id in before.items():
        assert asr.get_version(s, "latest").schema_id in (schema_id, sid2)
        assert asr.get_schema(schema_id).schema_str
    assert asr.get_latest_version(subject).schema_id == sid2
