"""Confluent-Avro values in Spark: the samsa source decodes them into a column with a
`samsa schema-registry` (valueFormat=avro), and the activity pipeline reads Avro events."""

from __future__ import annotations

import itertools
import json
from collections import Counter

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from registry_process import RegistryProcess
from samsa.client.producer import Producer
from samsa.pipelines import activity
from samsa.pipelines.common import PipelineConfig, ensure_topics
from samsa.pipelines.common import read_topic as read_topic_of_pipeline
from samsa.serialization.avro import KafkaAvroSerializer
from spark_helpers import source

V1 = {"type": "record", "name": "Reading", "namespace": "samsa.test",
      "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}]}
V2 = {**V1, "fields": V1["fields"] + [{"name": "unit", "type": ["null", "string"], "default": None},
                                      {"name": "tags", "type": {"type": "map", "values": "long"}, "default": {}}]}


def test_avro_values_decoded_by_the_source_and_read_by_the_activity_pipeline(spark, fresh_broker, tmp_path):
    bs = fresh_broker.bootstrap_servers
    registry = RegistryProcess(tmp_path / "registry", bs, **{"schema.registry.group.session.timeout.ms": "10000"})
    registry.start()
    try:
        sr = SchemaRegistryClient({"url": registry.url})
        topic = "readings"
        ctx = SerializationContext(topic, MessageField.VALUE)
        old = AvroSerializer(sr, json.dumps(V1))({"sensor": "a", "value": 1.5}, ctx)
        new = AvroSerializer(sr, json.dumps(V2))({"sensor": "b", "value": 2.0, "unit": "C", "tags": {"x": 1}}, ctx)
        with Producer({"bootstrap.servers": bs}) as p:
            for v in (old, new, b"not avro", None):
                p.send(topic, v, partition=0).result()
        df = source(spark, bs, stream=False, subscribe=topic, startingOffsets="earliest", valueFormat="avro",
                    **{"schema.registry.url": registry.url})
        assert df.schema["decodedValue"].dataType.simpleString() == \
            "struct<sensor:string,value:double,unit:string,tags:map<string,bigint>>"
        rows = [r.asDict(recursive=True) for r in df.orderBy("offset").select("offset", "decodedValue").collect()]
        assert [r["decodedValue"] for r in rows] == [
            {"sensor": "a", "value": 1.5, "unit": None, "tags": {}},        # v1 data read with v2: defaults
            {"sensor": "b", "value": 2.0, "unit": "C", "tags": {"x": 1}},
            None, None]                                                       # not Avro; a null value

        # the activity pipeline's reading of Avro events (subject activity-events-value): its own
        # read_topic, validation and event columns, on what is in the topic now
        cfg = PipelineConfig(bootstrap_servers=bs, state_dir=tmp_path / "state", value_format="avro",
                             schema_registry_url=registry.url)
        ensure_topics(cfg, [activity.EVENTS])
        ticks = itertools.count(1_767_225_600_000, 250)
        good = [json.loads(v) for _, v in itertools.islice(
            activity.generate(seed=3, clock=lambda: next(ticks), malformed=0.0), 200)]
        ser = KafkaAvroSerializer(activity.AVRO_SCHEMA, {"schema.registry.url": registry.url})
        bad_type = {**good[0], "event_id": "bad-1", "type": "hover"}
        with Producer({"bootstrap.servers": bs}) as p:
            for e in good + [bad_type]:
                p.send(activity.EVENTS, ser.serialize(activity.EVENTS, {"query": None, "element": None, **e}),
                       key=e["user_id"].encode(), partition=0)
            p.send(activity.EVENTS, b'{"json": "not avro"}', key=b"bad", partition=0)
            p.flush()
        stream = read_topic_of_pipeline(spark, cfg, activity.EVENTS, events=True)
        assert stream.isStreaming and "decodedValue" in stream.columns
        validated = activity.parse(source(spark, bs, stream=False, subscribe=activity.EVENTS,
                                          startingOffsets="earliest", valueFormat="avro",
                                          **{"schema.registry.url": registry.url}))
        rows = validated.select("reason", "event").collect()
        assert Counter(r["reason"] for r in rows) == {None: 200, "unknown event type 'hover'": 1,
                                                      "not Confluent Avro of the topic's value schema": 1}
        events = [json.loads(r["event"].toJson()) for r in rows if r["reason"] is None]
        assert Counter(e["page"] for e in events) == Counter(e["page"] for e in good)
        assert sorted(e["event_id"] for e in events) == sorted(e["event_id"] for e in good)
    finally:
        registry.stop()
