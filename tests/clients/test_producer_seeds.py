"""The seeds' producer examples in Python, and Samsa's producer read by other clients."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, TopicPartition

import samsa.embedded
import seed_plugins
from samsa import Producer
from samsa.client.connection import KafkaTimeoutError
from samsa.client.types import NewTopic
from samsa.serialization import IntegerSerializer, StringSerializer


@pytest.fixture(scope="module")
def broker():
    with samsa.embedded.Broker({"num.partitions": 1}) as b:
        yield b


def test_user_serializer_sync_get_and_callback_sends(broker):
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "key.serializer": StringSerializer,
                  "value.serializer": "seed_plugins.UserSerializer"})
    meta = p.send("tp_user_01", seed_plugins.User(1001, "张三"), key="u1").result(10)  # the seed's .get()
    done = []
    p.send("tp_user_01", seed_plugins.User(1002, "lisi"), key="u2",
           on_delivery=lambda m, e: done.append((m.offset, e)))  # the seed's Callback.onCompletion
    p.flush()
    p.close()
    assert meta.offset == 0 and done == [(1, None)]
    c = CKConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "users"})
    c.assign([CKTopicPartition("tp_user_01", 0, 0)])
    got = [c.poll(10) for _ in range(2)]
    c.close()
    assert [seed_plugins.deserialize_user(m.value()) for m in got] == [
        seed_plugins.User(1001, "张三"), seed_plugins.User(1002, "lisi")]


def test_interceptor_chain_by_dotted_names_with_class_content(broker):
    seed_plugins.EVENTS.clear()
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "key.serializer": IntegerSerializer,
                  "value.serializer": StringSerializer,
                  "interceptor.classes": "seed_plugins.InterceptorOne,seed_plugins.InterceptorTwo",
                  "classContent": "this is lagou's kafka class"})
    offsets = []
    p.send("tp_inter_01", "this is lagou's 1001 message", key=1001, partition=0,
           on_delivery=lambda m, e: offsets.append(m.offset))
    p.close()
    assert seed_plugins.EVENTS == [
        "one configured: this is lagou's kafka class", "two configured: this is lagou's kafka class",
        "拦截器1 -- go", "拦截器2 -- go", "拦截器1 -- back", "拦截器2 -- back", "one closed", "two closed"]
    assert offsets == [0]
    c = CKConsumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "inter"})
    c.assign([CKTopicPartition("tp_inter_01", 0, 0)])
    m = c.poll(10)
    c.close()
    assert m.value() == b"this is lagou's 1001 message (via two)" and m.key() == (1001).to_bytes(4, "big")


def test_kafka_python_reads_what_samsa_wrote_and_keys_land_where_librdkafka_puts_them(broker):
    with samsa.Admin({"bootstrap.servers": broker.bootstrap_servers}) as admin:
        admin.create_topics([NewTopic("interop", 6, 1), NewTopic("interop-ck", 6, 1)])
    keys = [f"key-{i}".encode() for i in range(60)]
    p = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 1})
    sent = {}
    for i, k in enumerate(keys):
        meta = p.send("interop", b"v%d" % i, key=k, timestamp=1_700_000_000_000 + i,
                      headers=[("n", b"%d" % i), ("empty", None)]).result(10)
        sent[k] = meta
    p.close()
    ck = CKProducer({"bootstrap.servers": broker.bootstrap_servers, "partitioner": "murmur2_random"})
    ck_partitions = {}
    for k in keys:
        ck.produce("interop-ck", b"x", key=k, on_delivery=lambda e, m: ck_partitions.__setitem__(m.key(), m.partition()))
    ck.flush(10)
    assert {k: m.partition for k, m in sent.items()} == ck_partitions  # Java's murmur2, as librdkafka computes it
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap_servers, enable_auto_commit=False,
                             consumer_timeout_ms=10000)
    consumer.assign([TopicPartition("interop", p) for p in range(6)])
    consumer.seek_to_beginning()
    got = {}
    deadline = time.time() + 30
    while len(got) < len(keys) and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            for r in records:
                got[r.key] = r
    consumer.close()
    for i, k in enumerate(keys):
        r = got[k]
        assert (r.partition, r.offset, r.value, r.timestamp) == (sent[k].partition, sent[k].offset, b"v%d" % i,
                                                                 1_700_000_000_000 + i)
        assert r.headers == [("n", b"%d" % i), ("empty", None)]


def test_missing_topic_with_auto_create_off_times_out_naming_it():
    with samsa.embedded.Broker({"auto.create.topics.enable": False}) as b:
        p = Producer({"bootstrap.servers": b.bootstrap_servers, "max.block.ms": 1000})
        with pytest.raises(KafkaTimeoutError, match="Topic nowhere not present in metadata after 1000 ms"):
            p.send("nowhere", b"x")
        p.close(5)
