"""Kafka's own MirrorMaker 2 (``org.apache.kafka.connect.mirror.MirrorMaker``, the class ``connect-mirror-maker.sh``
runs, with an mm2.properties) between two Samsa clusters: connect-mirror 4.3.0 on its own 4.3.0 jars (its 4.4.0 jar
is not served by the Maven Central reachable here; tests/kafka/connect-4.3.0/pom.xml). On the target: the topic
``source.<topic>`` with the source's partition count and its topic config, every record copied (and a topic created,
grown and reconfigured on the source while MM2 runs followed on the target), MM2's heartbeats and
checkpoints topics (the offset syncs on the source, MM2's default ``offset-syncs.topic.location``), a consumer group's
checkpoints in ``source.checkpoints.internal``, and with ``sync.group.offsets.enabled`` the group's translated
offsets committed on the target.

``SAMSA_JAVA_ECO_BROKER=kafka`` runs the same scenario between two Apache Kafka 4.4.0 brokers."""

from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

import kafka_process
from broker_process import BrokerProcess, ChildProcess
from test_mirror_maker import _produce, _read_all
from waiting import wait_until

from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.types import AlterConfigOp, ConfigResource, NewTopic, TopicPartition

WAIT = 120
TOPIC, GROUP, PARTITIONS, RECORDS = "orders", "billing", 3, 90
# the topic config MM2 syncs; 100 years, as test_mirror_maker's records carry 2023 timestamps that a shorter
# retention deletes at the broker's first retention check
RETENTION_MS = str(100 * 365 * 24 * 3600 * 1000)
LATE_TOPIC = "payments"         # created once MM2 runs, then grown and reconfigured


class MirrorMaker2(ChildProcess):
    """``connect-mirror-maker.sh mm2.properties``: Kafka's MirrorMaker 2 in dedicated mode, in a child JVM."""
    stop_timeout = 60

    def __init__(self, workdir: Path, properties: dict[str, str]):
        workdir.mkdir(parents=True, exist_ok=True)
        self.config = workdir / "mm2.properties"
        self.config.write_text("".join(f"{k} = {v}\n" for k, v in properties.items()))
        self.log_path = workdir / "mm2.log"
        self.log4j = workdir / "log4j2.yaml"
        self.log4j.write_text(kafka_process.LOG4J2.format(
            path=self.log_path, level=os.environ.get("SAMSA_KAFKA_LOG_LEVEL", "INFO")))

    def start(self) -> "MirrorMaker2":
        cmd = kafka_process.java("org.apache.kafka.connect.mirror.MirrorMaker", str(self.config),
                                 cp=kafka_process.connect_plugins_classpath())
        cmd.insert(cmd.index("-cp"), f"-Dlog4j2.configurationFile={self.log4j}")   # the last one set wins
        self.proc = subprocess.Popen(cmd, stdout=open(self.log_path.with_suffix(".out"), "ab"),
                                     stderr=subprocess.STDOUT)
        return self


def _cluster(tmp_path_factory, name: str):
    if os.environ.get("SAMSA_JAVA_ECO_BROKER") == "kafka":
        return kafka_process.KafkaProcess(tmp_path_factory.mktemp(name)).start()
    return BrokerProcess(tmp_path_factory.mktemp(name)).start()


@pytest.fixture(scope="module")
def mirrored(tmp_path_factory):
    """Two clusters, a topic and a consumer group on the source, and MM2 mirroring source->target."""
    source = _cluster(tmp_path_factory, "source")
    target = _cluster(tmp_path_factory, "target")
    mm = None
    try:
        with Admin({"bootstrap.servers": source.bootstrap}) as admin:
            admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1, config={"retention.ms": RETENTION_MS})])
        _produce(source.bootstrap, TOPIC, [(i % PARTITIONS, f"k{i}".encode(), f"v{i}".encode())
                                           for i in range(RECORDS)])
        with Consumer({"bootstrap.servers": source.bootstrap, "group.id": GROUP,
                       "enable.auto.commit": False}) as c:   # the group has read everything
            c.commit({TopicPartition(TOPIC, p): RECORDS // PARTITIONS for p in range(PARTITIONS)})
        mm = MirrorMaker2(tmp_path_factory.mktemp("mm2"), {
            "clusters": "source, target",
            "source.bootstrap.servers": source.bootstrap, "target.bootstrap.servers": target.bootstrap,
            "source->target.enabled": "true", "source->target.topics": f"{TOPIC}, {LATE_TOPIC}",
            "replication.factor": "1", "checkpoints.topic.replication.factor": "1",
            "heartbeats.topic.replication.factor": "1", "offset-syncs.topic.replication.factor": "1",
            "offset.storage.replication.factor": "1", "status.storage.replication.factor": "1",
            "config.storage.replication.factor": "1",
            "sync.group.offsets.enabled": "true", "sync.group.offsets.interval.seconds": "1",
            "emit.checkpoints.interval.seconds": "1", "emit.heartbeats.interval.seconds": "1",
            "refresh.topics.interval.seconds": "1", "refresh.groups.interval.seconds": "1",
            "sync.topic.configs.interval.seconds": "1", "offset.flush.interval.ms": "1000",
            "offset.lag.max": "0",      # an offset sync for every record: the group's offsets translate exactly
        }).start()
        yield source, target, mm
    finally:
        if mm is not None:
            mm.stop()
        source.stop()
        target.stop()


def _topics(bootstrap: str) -> set[str]:
    with Admin({"bootstrap.servers": bootstrap}) as admin:
        return set(admin.list_topics())


def _alive(mm: MirrorMaker2) -> None:
    assert mm.proc.poll() is None, mm.log_text()[-5000:]


def test_topic_partitions_config_and_every_record_mirrored(mirrored):
    source, target, mm = mirrored
    wait_until(lambda: _alive(mm) or f"source.{TOPIC}" in _topics(target.bootstrap), "source.orders on the target",
               WAIT)
    with Admin({"bootstrap.servers": target.bootstrap}) as admin:
        described = admin.describe_topics([f"source.{TOPIC}"])
    assert len(next(iter(described.values())).partitions) == PARTITIONS

    def config_synced() -> bool:
        with Admin({"bootstrap.servers": target.bootstrap}) as admin:
            configs = admin.describe_configs([ConfigResource("topic", f"source.{TOPIC}")])
        return next(iter(configs.values()))["retention.ms"].value == RETENTION_MS
    wait_until(config_synced, "retention.ms synced to source.orders", WAIT)
    mirrored_records = _read_all(target.bootstrap, f"source.{TOPIC}", PARTITIONS, RECORDS)
    originals = {(r.partition, r.key): r for r in _read_all(source.bootstrap, TOPIC, PARTITIONS, RECORDS)}
    assert sorted((r.partition, r.key) for r in mirrored_records) == sorted(originals)     # each once
    for r in mirrored_records:
        o = originals[(r.partition, r.key)]
        assert (r.value, r.timestamp, tuple(r.headers), r.offset) == (o.value, o.timestamp, tuple(o.headers), o.offset)


def test_heartbeats_offset_syncs_and_checkpoints_topics(mirrored):
    source, target, mm = mirrored
    wait_until(lambda: _alive(mm) or {"heartbeats", "source.checkpoints.internal"} <= _topics(target.bootstrap),
               "MM2's heartbeats and checkpoints topics on the target", WAIT)
    wait_until(lambda: "mm2-offset-syncs.target.internal" in _topics(source.bootstrap),
               "MM2's offset-syncs topic on the source", WAIT)

    def end_offset(bootstrap: str, topic: str) -> int:
        with Admin({"bootstrap.servers": bootstrap}) as admin:
            return next(iter(admin.list_offsets({TopicPartition(topic, 0): "latest"}).values())).offset
    wait_until(lambda: end_offset(target.bootstrap, "heartbeats") > 0, "heartbeats emitted on the target", WAIT)
    wait_until(lambda: end_offset(source.bootstrap, "mm2-offset-syncs.target.internal") > 0,
               "offset syncs written on the source", WAIT)


def _checkpoint(key: bytes, value: bytes) -> tuple[str, str, int, int, int]:
    """MM2's checkpoint record: key (group, topic, partition), value (version, upstream, downstream offsets...)."""
    n = struct.unpack_from(">h", key)[0]
    group, at = key[2:2 + n].decode(), 2 + n
    n = struct.unpack_from(">h", key, at)[0]
    topic, at = key[at + 2:at + 2 + n].decode(), at + 2 + n
    partition = struct.unpack_from(">i", key, at)[0]
    _version, upstream, downstream = struct.unpack_from(">hqq", value)
    return group, topic, partition, upstream, downstream


def test_checkpoints_and_translated_group_offsets_on_the_target(mirrored):
    source, target, mm = mirrored
    per_partition = RECORDS // PARTITIONS
    expected = {p: per_partition for p in range(PARTITIONS)}      # offsets are kept: the translation is exact

    got: dict[int, tuple[int, int]] = {}       # the latest checkpoint of each partition

    def checkpoints() -> bool:
        _alive(mm)
        for r in c.poll(0.5):
            group, topic, partition, upstream, downstream = _checkpoint(r.key, r.value)
            if (group, topic) == (GROUP, f"source.{TOPIC}"):
                got[partition] = (upstream, downstream)
        return got == {p: (o, o) for p, o in expected.items()}
    with Consumer({"bootstrap.servers": target.bootstrap, "auto.offset.reset": "earliest",
                   "enable.auto.commit": False}) as c:
        c.assign([TopicPartition("source.checkpoints.internal", 0)])
        wait_until(checkpoints, f"group {GROUP}'s checkpoints (upstream = downstream = {per_partition}) in "
                   "source.checkpoints.internal", WAIT)

    def translated() -> dict[int, int]:
        _alive(mm)
        with Admin({"bootstrap.servers": target.bootstrap}) as admin:
            offsets = admin.list_consumer_group_offsets(GROUP)
        return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == f"source.{TOPIC}"}
    wait_until(lambda: translated() == expected, f"group {GROUP}'s translated offsets committed on the target", WAIT)


def test_a_topic_created_grown_and_reconfigured_while_mm2_runs(mirrored):
    source, target, mm = mirrored
    mirror = f"source.{LATE_TOPIC}"
    wait_until(lambda: _alive(mm) or f"source.{TOPIC}" in _topics(target.bootstrap), "MM2 mirroring", WAIT)
    with Admin({"bootstrap.servers": source.bootstrap}) as admin:
        admin.create_topics([NewTopic(LATE_TOPIC, 2, 1, config={"retention.ms": RETENTION_MS})])
    _produce(source.bootstrap, LATE_TOPIC, [(i % 2, f"k{i}".encode(), f"v{i}".encode()) for i in range(10)])
    wait_until(lambda: _alive(mm) or mirror in _topics(target.bootstrap), f"{mirror} on the target", WAIT)
    with Admin({"bootstrap.servers": source.bootstrap}) as admin:
        admin.create_partitions({LATE_TOPIC: 4})
        admin.incremental_alter_configs({ConfigResource("topic", LATE_TOPIC): [
            AlterConfigOp("max.message.bytes", "654321")]})
    _produce(source.bootstrap, LATE_TOPIC, [(i % 4, f"k{i}".encode(), f"v{i}".encode()) for i in range(10, 30)])

    def followed() -> bool:
        _alive(mm)
        with Admin({"bootstrap.servers": target.bootstrap}) as admin:
            partitions = len(next(iter(admin.describe_topics([mirror]).values())).partitions)
            configs = next(iter(admin.describe_configs([ConfigResource("topic", mirror)]).values()))
        return partitions == 4 and configs["max.message.bytes"].value == "654321"
    wait_until(followed, f"{mirror} grown to 4 partitions and its max.message.bytes synced", WAIT)
    mirrored_records = _read_all(target.bootstrap, mirror, 4, 30)
    originals = {(r.partition, r.key): r for r in _read_all(source.bootstrap, LATE_TOPIC, 4, 30)}
    assert sorted((r.partition, r.key) for r in mirrored_records) == sorted(originals)
    for r in mirrored_records:
        assert (r.value, r.offset) == (originals[(r.partition, r.key)].value, originals[(r.partition, r.key)].offset)
