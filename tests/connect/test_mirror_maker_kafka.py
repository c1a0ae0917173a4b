"""Samsa's MirrorMaker 2 (`samsa mirror-maker mm2.properties`) between a Samsa broker and Apache Kafka 4.4.0,
both directions at once: records (values, keys, headers, timestamps, offsets), topic configs, and a consumer
group's offsets translated on the other side."""

from __future__ import annotations

import pytest

from broker_process import BrokerProcess
from connect_helpers import MirrorMakerProcess
from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.types import ConfigResource, NewTopic, TopicPartition
from test_mirror_maker import COMMON, _produce, _read_all
from waiting import wait_until


@pytest.fixture
def samsa_broker(tmp_path):
    b = BrokerProcess(tmp_path / "samsa").start()
    yield b
    b.stop()


def _seed(bootstrap: str, topic: str, group: str) -> None:
    # retention.ms of 100 years: _produce's records carry 2023 timestamps, which a shorter retention lets the
    # session's Kafka broker delete at its next retention check (every 5 minutes), perhaps mid-test
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        admin.create_topics([NewTopic(topic, 2, 1, config={"retention.ms": "3153600000000"})])
    _produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(40)])
    with Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False}) as c:
        c.commit({TopicPartition(topic, 0): 5, TopicPartition(topic, 1): 7})


def _check(source: str, target: str, alias: str, topic: str, group: str) -> None:
    mirrored = _read_all(target, f"{alias}.{topic}", 2, 40)
    originals = {(r.partition, r.key): r for r in _read_all(source, topic, 2, 40)}
    assert len(mirrored) == 40
    for r in mirrored:
        o = originals[(r.partition, r.key)]
        assert (r.value, r.timestamp, tuple(r.headers), r.offset) == (o.value, o.timestamp, tuple(o.headers), o.offset)
    with Admin({"bootstrap.servers": target}) as admin:
        configs = admin.describe_configs([ConfigResource("topic", f"{alias}.{topic}")])
        assert next(iter(configs.values()))["retention.ms"].value == "3153600000000"

    def translated() -> bool:
        with Admin({"bootstrap.servers": target}) as admin:
            got = admin.list_consumer_group_offsets(group)
        return {tp.partition: om.offset for tp, om in got.items() if tp.topic == f"{alias}.{topic}"} == {0: 5, 1: 7}
    wait_until(translated, f"group {group}'s offsets translated into {alias}'s target", 90)


def test_samsa_mirror_maker_between_samsa_and_kafka_both_ways(samsa_broker, kafka, tmp_path):
    s, k = samsa_broker.bootstrap, kafka.bootstrap
    _seed(s, "from-samsa", "g-samsa")
    _seed(k, "from-kafka", "g-kafka")
    mm = MirrorMakerProcess(tmp_path / "mm", f"clusters = S, K\nS.bootstrap.servers = PLAINTEXT://{s}\n"
                                             f"K.bootstrap.servers = {k}\nS->K.enabled = true\nK->S.enabled = true\n"
                                             "S->K.topics = from-samsa\nK->S.topics = from-kafka\n"
                                             f"{COMMON}").start()
    try:
        _check(s, k, "S", "from-samsa", "g-samsa")
        _check(k, s, "K", "from-kafka", "g-kafka")
    finally:
        mm.stop()
    assert mm.proc.returncode == 0, mm.log_text()[-3000:]
