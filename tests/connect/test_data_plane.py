"""Converters and single message transforms, with Kafka's class names and config keys."""

from __future__ import annotations

import pytest

from samsa.connect import plugins
from samsa.connect.converters import JsonConverter, StringConverter
from samsa.connect.data import INT64_SCHEMA, STRING_SCHEMA, SinkRecord, struct
from samsa.connect.errors import DataException
from samsa.connect.transforms import TransformationChain

P = "org.apache.kafka.connect.transforms."
SCHEMA = struct("row", id=INT64_SCHEMA, name=STRING_SCHEMA)


def record(value=None, topic="orders", headers=()):
    return SinkRecord(topic, 0, None, None, SCHEMA, {"id": 7, "name": "x"} if value is None else value,
                      1_700_000_000_000, list(headers), 42)


def chain(**config):
    return TransformationChain({k.replace("__", "."): v for k, v in config.items()}, plugins.find_transform)


def test_json_converter_envelope_round_trip():
    conv = plugins.converter("org.apache.kafka.connect.json.JsonConverter")
    conv.configure({"schemas.enable": "true"}, False)
    raw = conv.from_connect_data("t", SCHEMA, {"id": 7, "name": "x"})
    assert raw == (b'{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"},'
                   b'{"type":"string","optional":false,"field":"name"}],"optional":false,"name":"row"},'
                   b'"payload":{"id":7,"name":"x"}}')
    schema, value = conv.to_connect_data("t", raw)
    assert schema == SCHEMA and value == {"id": 7, "name": "x"}
    with pytest.raises(DataException, match="schemas.enable requires"):
        conv.to_connect_data("t", b'{"id": 1}')
    plain = JsonConverter()
    plain.configure({"schemas.enable": "false"}, False)
    assert plain.to_connect_data("t", b'{"id": 1}') == (None, {"id": 1})
    assert plain.from_connect_data("t", None, None) is None
    assert StringConverter().to_connect_data("t", b"hi")[1] == "hi"
    assert plugins.converter("org.apache.kafka.connect.converters.ByteArrayConverter").from_connect_data(
        "t", None, b"\x00") == b"\x00"


def test_insert_replace_extract_value_to_key():
    out = chain(transforms="ins,rep,v2k", transforms__ins__type=P + "InsertField$Value",
                **{"transforms.ins.topic.field": "t", "transforms.ins.static.field": "dc",
                   "transforms.ins.static.value": "eu", "transforms.ins.offset.field": "o"},
                transforms__rep__type=P + "ReplaceField$Value", transforms__rep__renames="name:label",
                transforms__rep__exclude="o",
                transforms__v2k__type=P + "ValueToKey", transforms__v2k__fields="id").apply(record())
    assert out.value == {"id": 7, "label": "x", "t": "orders", "dc": "eu"}
    assert [f.name for f in out.value_schema.fields] == ["id", "label", "t", "dc"]
    assert out.key == {"id": 7} and out.key_schema.fields[0].schema == INT64_SCHEMA
    extracted = chain(transforms="e", transforms__e__type=P + "ExtractField$Value",
                      transforms__e__field="name").apply(record())
    assert extracted.value == "x" and extracted.value_schema == STRING_SCHEMA


def test_routers():
    r = chain(transforms="r", transforms__r__type=P + "RegexRouter", transforms__r__regex="(.*)ers",
              transforms__r__replacement="$1-copy").apply(record())
    assert r.topic == "ord-copy"
    t = chain(transforms="t", transforms__t__type="TimestampRouter",
              **{"transforms.t.topic.format": "${topic}_${timestamp}",
                 "transforms.t.timestamp.format": "yyyy-MM-dd"}).apply(record())
    assert t.topic == "orders_2023-11-14"


def test_filter_with_predicates_and_negate():
    base = {"transforms": "drop", "transforms.drop.type": P + "Filter", "transforms.drop.predicate": "p",
            "predicates": "p"}
    tomb = TransformationChain({**base, "predicates.p.type": P + "predicates.RecordIsTombstone"},
                               plugins.find_transform)
    assert tomb.apply(record()) is not None
    assert tomb.apply(record().new_record(value=None)) is None
    name = TransformationChain({**base, "predicates.p.type": P + "predicates.TopicNameMatches",
                                "predicates.p.pattern": "ord.*", "transforms.drop.negate": "true"},
                               plugins.find_transform)
    assert name.apply(record()) is not None and name.apply(record(topic="other")) is None
    header = TransformationChain({**base, "predicates.p.type": P + "predicates.HasHeaderKey",
                                  "predicates.p.name": "skip"}, plugins.find_transform)
    assert header.apply(record(headers=[("skip", b"1")])) is None and header.apply(record()) is not None


def test_connector_class_names():
    from samsa.connect.connectors.file import FileStreamSinkConnector, FileStreamSourceConnector
    for name in ("org.apache.kafka.connect.file.FileStreamSourceConnector", "FileStreamSourceConnector",
                 "FileStreamSource", "samsa.connect.connectors.file.FileStreamSourceConnector"):
        assert plugins.connector_class(name) is FileStreamSourceConnector
    assert plugins.connector_class("FileStreamSink") is FileStreamSinkConnector
