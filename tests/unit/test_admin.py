"""The admin client and its connection layer against an embedded broker (and a fake one)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest
from confluent_kafka import Producer

from samsa.client.admin import Admin, AsyncAdmin
from samsa.client.metadata import ClusterMetadata, parse_bootstrap_servers
from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError
from samsa.client.types import (
    AlterConfigOp,
    ConfigResource,
    NewPartitions,
    NewTopic,
    TopicPartition,
    uuid_from_str,
    uuid_to_str,
)
from samsa.embedded import Broker
from samsa.protocol import api, errors
from waiting import wait_until

TS = (int(time.time()) - 3600) * 1000


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


@pytest.fixture(scope="module")
def admin(broker):
    with Admin({"bootstrap.servers": broker.bootstrap_servers, "client.id": "test-admin"}) as a:
        yield a


@pytest.fixture
def topic(admin, request):
    name = "adm-" + request.node.name.replace("[", "-").replace("]", "")
    admin.create_topics([NewTopic(name, 2, 1)])
    yield name
    if name in admin.list_topics():
        admin.delete_topics([name])


def dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---------------------------------------------------------------------------- topics

def test_topic_lifecycle(admin):
    admin.create_topics([NewTopic("lifecycle", 3, 1, config={"retention.ms": "1000"})])
    listing = admin.list_topics()
    assert "lifecycle" in listing and not listing["lifecycle"].is_internal
    desc = admin.describe_topics(["lifecycle"])["lifecycle"]
    assert desc.topic_id == listing["lifecycle"].topic_id and len(uuid_from_str(desc.topic_id)) == 16
    assert [(p.partition, p.leader, p.replicas, p.isr, p.offline) for p in desc.partitions] == [
        (i, 0, [0], [0], []) for i in range(3)]
    admin.create_partitions({"lifecycle": 5})
    assert len(admin.describe_topics(["lifecycle"])["lifecycle"].partitions) == 5
    admin.create_partitions({"lifecycle": NewPartitions(6, [[0]])})
    assert len(admin.describe_topics(["lifecycle"])["lifecycle"].partitions) == 6
    admin.delete_topics(["lifecycle"])
    assert "lifecycle" not in admin.list_topics()


def test_create_topics_defaults_and_assignment(admin):
    admin.create_topics([NewTopic("defaults"), NewTopic("manual", replica_assignment={0: [0], 1: [0]})])
    parts = admin.describe_topics(["defaults", "manual"])
    assert len(parts["defaults"].partitions) == 1  # num.partitions
    assert [p.replicas for p in parts["manual"].partitions] == [[0], [0]]
    admin.delete_topics(["defaults", "manual"])


def test_validate_only_creates_nothing(admin):
    admin.create_topics([NewTopic("validated", 1, 1)], validate_only=True)
    assert "validated" not in admin.list_topics()


def test_topic_errors(admin, topic):
    with pytest.raises(errors.TopicAlreadyExistsError, match=f"Topic '{topic}' already exists."):
        admin.create_topics([NewTopic(topic, 1, 1)])
    with pytest.raises(errors.InvalidReplicationFactorError) as e:
        admin.create_topics([NewTopic("rf3", 1, 3)])
    assert "only 1 broker(s) are registered" in e.value.args[0]
    assert not e.value.args[0].startswith("INVALID_REPLICATION_FACTOR")  # the broker's words only
    with pytest.raises(errors.InvalidTopicError):
        admin.create_topics([NewTopic("no spaces", 1, 1)])
    with pytest.raises(errors.InvalidConfigError, match="retention.ms"):
        admin.create_topics([NewTopic("badcfg", 1, 1, config={"retention.ms": "abc"})])
    with pytest.raises(errors.InvalidPartitionsError, match="would not be an increase"):
        admin.create_partitions({topic: 1})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.describe_topics(["does-not-exist"])
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.delete_topics(["does-not-exist"])
    assert "does-not-exist" not in admin.list_topics()  # describing did not auto-create it


def test_internal_topics_are_hidden_unless_asked(admin, broker):
    async def find_coordinator() -> None:  # makes the broker create __consumer_offsets
        conn = BrokerConnection("127.0.0.1", broker.port)
        await conn.connect()
        try:
            await conn.request(10, {"key": "g", "key_type": 0, "coordinator_keys": ["g"]})
        finally:
            conn.close()
    asyncio.run(find_coordinator())
    wait_until(lambda: "__consumer_offsets" in admin.list_topics(include_internal=True), "__consumer_offsets", 30)
    listing = admin.list_topics(include_internal=True)
    assert listing["__consumer_offsets"].is_internal
    assert "__consumer_offsets" not in admin.list_topics()


# ---------------------------------------------------------------------------- configs

def test_describe_and_alter_topic_configs(admin, topic):
    res = ConfigResource("topic", topic)
    entries = admin.describe_configs([res])[res]
    assert entries["retention.ms"].is_default and entries["retention.ms"].source == "DEFAULT_CONFIG"
    assert entries["segment.bytes"].value == "1073741824"

    admin.incremental_alter_configs({res: [AlterConfigOp("retention.ms", "1000"),
                                           AlterConfigOp("cleanup.policy", "compact", "append")]})
    entries = admin.describe_configs([res], include_synonyms=True)[res]
    assert (entries["retention.ms"].value, entries["retention.ms"].source) == ("1000", "DYNAMIC_TOPIC_CONFIG")
    assert not entries["retention.ms"].is_default
    assert entries["retention.ms"].synonyms[0].source == "DYNAMIC_TOPIC_CONFIG"
    assert entries["cleanup.policy"].value == "delete,compact"

    admin.incremental_alter_configs({res: [AlterConfigOp("retention.ms", op="delete"),
                                           AlterConfigOp("cleanup.policy", "delete", "subtract")]})
    entries = admin.describe_configs([res])[res]
    assert entries["retention.ms"].is_default
    assert entries["cleanup.policy"].value == "compact"

    # AlterConfigs replaces the whole set of overrides.
    admin.alter_configs({res: {"retention.ms": "2000"}})
    entries = admin.describe_configs([res])[res]
    assert entries["retention.ms"].value == "2000" and entries["cleanup.policy"].is_default

    with pytest.raises(errors.InvalidConfigError, match="abc"):
        admin.incremental_alter_configs({res: [AlterConfigOp("retention.ms", "abc")]})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.describe_configs([ConfigResource("topic", "does-not-exist")])


def test_broker_configs(admin, topic):
    res = ConfigResource("broker", "0")
    entries = admin.describe_configs([res], include_synonyms=True)[res]
    assert entries["auto.create.topics.enable"].read_only and not entries["log.retention.ms"].read_only
    admin.incremental_alter_configs({res: [AlterConfigOp("log.retention.ms", "7777")]})
    try:
        assert admin.describe_configs([res])[res]["log.retention.ms"].source == "DYNAMIC_BROKER_CONFIG"
        topic_entry = admin.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)]
        assert topic_entry["retention.ms"].value == "7777"
    finally:
        admin.incremental_alter_configs({res: [AlterConfigOp("log.retention.ms", op="delete")]})
    with pytest.raises(errors.InvalidRequestError, match=r"dynamically: \[auto.create.topics.enable\]"):  # as Kafka
        admin.incremental_alter_configs({res: [AlterConfigOp("auto.create.topics.enable", "false")]})
    default = ConfigResource("broker", "")
    admin.incremental_alter_configs({default: [AlterConfigOp("log.retention.bytes", "12345")]})
    try:
        entry = admin.describe_configs([default])[default]["log.retention.bytes"]
        assert (entry.value, entry.source) == ("12345", "DYNAMIC_DEFAULT_BROKER_CONFIG")
    finally:
        admin.incremental_alter_configs({default: [AlterConfigOp("log.retention.bytes", op="delete")]})


def test_config_types_validate():
    with pytest.raises(ValueError):
        ConfigResource("client_metrics", "g")
    with pytest.raises(ValueError):
        AlterConfigOp("x", "1", "replace")


# ---------------------------------------------------------------------------- cluster, offsets, records

def test_describe_cluster(admin, broker):
    desc = admin.describe_cluster()
    assert desc.cluster_id and len(desc.brokers) == 1
    assert desc.controller == desc.brokers[0]
    assert (desc.brokers[0].id, desc.brokers[0].port) == (0, broker.port)


def test_offsets_and_delete_records(admin, broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 0, "log_level": 0})
    for i in range(5):
        producer.produce(topic, value=b"v%d" % i, partition=0, timestamp=TS + 1000 * i)
    producer.flush(30)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    offsets = admin.list_offsets({tp0: "latest", tp1: "latest"})
    assert (offsets[tp0].offset, offsets[tp1].offset) == (5, 0)
    assert admin.list_offsets({tp0: "earliest"})[tp0].offset == 0
    assert admin.list_offsets({tp0: TS + 2500})[tp0].offset == 3
    newest = admin.list_offsets({tp0: "max_timestamp"})[tp0]
    assert (newest.offset, newest.timestamp) == (4, TS + 4000)

    assert admin.delete_records({tp0: 2}) == {tp0: 2}
    assert admin.list_offsets({tp0: "earliest"})[tp0].offset == 2
    with pytest.raises(errors.OffsetOutOfRangeError):
        admin.delete_records({tp0: 99})
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.list_offsets({TopicPartition(topic, 9): "latest"})
    with pytest.raises(ValueError):
        admin.list_offsets({tp0: "newest"})


def test_list_offsets_after_the_last_timestamp(admin, broker, topic):
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "log_level": 0})
    producer.produce(topic, value=b"v", partition=0, timestamp=TS)
    producer.flush(30)
    tp = TopicPartition(topic, 0)
    found = admin.list_offsets({tp: TS + 3_600_000})[tp]
    assert (found.offset, found.timestamp) == (-1, -1)


def test_broker_error_messages_are_bare(broker, topic):
    async def go() -> str:
        conn = BrokerConnection("127.0.0.1", broker.port)
        await conn.connect()
        try:
            resp = await conn.request(19, {"topics": [{"name": topic, "num_partitions": 1, "replication_factor": 1}],
                                           "timeout_ms": 5000})
        finally:
            conn.close()
        return resp["topics"][0]["error_message"]
    assert asyncio.run(go()) == f"Topic '{topic}' already exists."


def test_describe_log_dirs(admin, topic):
    dirs = admin.describe_log_dirs()
    assert list(dirs) == [0]
    (log_dir, desc), = dirs[0].items()
    assert desc.error is None and desc.total_bytes and desc.usable_bytes is not None
    assert TopicPartition(topic, 0) in desc.replicas and TopicPartition(topic, 1) in desc.replicas


# ---------------------------------------------------------------------------- bootstrap and connections

def test_unreachable_bootstrap_names_the_servers():
    ports = [dead_port(), dead_port()]
    servers = ",".join(f"127.0.0.1:{p}" for p in ports)
    start = time.monotonic()
    with Admin({"bootstrap.servers": servers, "request.timeout.ms": 800}) as a:
        with pytest.raises(KafkaTimeoutError) as e:
            a.list_topics()
    assert time.monotonic() - start < 10
    assert servers in str(e.value) and "800 ms" in str(e.value)
    assert isinstance(e.value, errors.KafkaError)


def test_bootstrap_skips_a_dead_server(broker):
    with Admin({"bootstrap.servers": f"127.0.0.1:{dead_port()},{broker.bootstrap_servers}"}) as a:
        assert a.describe_cluster().brokers[0].port == broker.port


def test_parse_bootstrap_servers():
    assert parse_bootstrap_servers("a:1, b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    # a listener or protocol prefix, read past as the Java client does (Confluent's form)
    assert parse_bootstrap_servers("PLAINTEXT://a:1,SASL_SSL://b:2,INTERNAL://[::1]:3") == [
        ("a", 1), ("b", 2), ("::1", 3)]
    for bad in ("a", "a:b", "", ":9092", "PLAINTEXT://", "SSL://:9092"):
        with pytest.raises(ValueError):
            parse_bootstrap_servers(bad)
    with pytest.raises(ValueError):
        Admin({"bootstrap.servers": "nohost"})
    with pytest.raises(ValueError):
        Admin({})


def test_uuid_text_form():
    raw = bytes(range(16))
    assert uuid_to_str(raw) == "AAECAwQFBgcICQoLDA0ODw"
    assert uuid_from_str(uuid_to_str(raw)) == raw


def test_connection_pipelines_and_negotiates(broker):
    async def go():
        conn = BrokerConnection("127.0.0.1", broker.port, "pipeline-test", request_timeout_ms=5000)
        await conn.connect()
        try:
            assert conn.api_versions[3][1] >= 9
            assert conn.pick_version(3) == min(conn.api_versions[3][1], api.api(3).max_version)
            assert conn.pick_version(3, max_version=4) == 4
            with pytest.raises(errors.UnsupportedVersionError):
                conn.pick_version(3, min_version=999)
            answers = await asyncio.gather(*[
                conn.request(3, {"topics": []}, max_version=v) for v in (1, 4, 9, 12) * 5])
            assert all(a["brokers"][0]["port"] == broker.port for a in answers)
        finally:
            conn.close()
        with pytest.raises(KafkaConnectionError):
            await conn.request(3, {"topics": []})
    asyncio.run(go())


def test_cluster_connections(broker):
    async def go():
        cluster = ClusterMetadata(broker.bootstrap_servers)
        await cluster.bootstrap()
        try:
            assert cluster.controller_id == 0 and 0 in cluster.brokers
            controller = await cluster.controller()
            assert controller is await cluster.node(0) is await cluster.any()
            with pytest.raises(errors.UnknownTopicOrPartitionError):
                await cluster.leader_for("no-such-topic", 0)
        finally:
            cluster.close()
    asyncio.run(go())


def test_async_admin(broker):
    async def go():
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap_servers}) as a:
            await a.create_topics([NewTopic("async-topic", 1, 1)])
            assert "async-topic" in await a.list_topics()
            await a.delete_topics(["async-topic"])
    asyncio.run(go())


async def _fake_broker(handle) -> tuple[asyncio.AbstractServer, int]:
    """A server answering each request frame with ``handle(header, frame)``: response chunks,
    None (no answer) or "close" (hang up)."""
    async def serve(reader, writer):
        try:
            while True:
                (size,) = struct.unpack(">i", await reader.readexactly(4))
                frame = await reader.readexactly(size)
                out = handle(api.peek_request_header(frame), frame)
                if out == "close":
                    writer.close()
                    return
                if out is not None:
                    writer.writelines(out)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def test_api_versions_fallback_to_v0():
    seen = []

    def handle(header, frame):
        key, version, cid = header
        seen.append((key, version))
        if version > 0:  # a broker that only knows ApiVersions v0
            return api.api_versions_v0_fallback(cid, [(18, 0, 0), (3, 0, 5)])
        return api.encode_response(18, 0, cid, {"error_code": 0, "api_keys": [
            {"api_key": 18, "min_version": 0, "max_version": 0}, {"api_key": 3, "min_version": 0, "max_version": 5}]})

    async def go():
        server, port = await _fake_broker(handle)
        async with server:
            conn = BrokerConnection("127.0.0.1", port)
            await conn.connect()
            assert conn.api_versions == {18: (0, 0), 3: (0, 5)}
            assert conn.pick_version(3) == 5
            conn.close()
    asyncio.run(go())
    assert seen == [(18, 3), (18, 0)]


def test_request_timeout_and_disconnect():
    def handle(header, frame):
        key, version, cid = header
        if key == 18:
            return api.encode_response(18, 3, cid, {"error_code": 0, "api_keys": [
                {"api_key": 18, "min_version": 0, "max_version": 3}, {"api_key": 3, "min_version": 0, "max_version": 12}]})
        if key == 3 and version == 1:
            return "close"
        return None  # never answer anything else

    async def go():
        server, port = await _fake_broker(handle)
        async with server:
            conn = BrokerConnection("127.0.0.1", port, request_timeout_ms=200)
            await conn.connect()
            with pytest.raises(KafkaTimeoutError, match="Metadata request to 127.0.0.1:.* timed out after 200 ms"):
                await conn.request(3, {"topics": []})
            waiting = asyncio.ensure_future(conn.request(3, {"topics": []}, max_version=4, timeout_ms=10000))
            await asyncio.sleep(0.05)  # time passes (asserting that something has NOT happened needs it)
            assert not waiting.done()
            with pytest.raises(KafkaConnectionError, match="the broker closed the connection"):
                await conn.request(3, {"topics": []}, version=1, timeout_ms=10000)  # the fake hangs up
            with pytest.raises(KafkaConnectionError):
                await waiting
            assert not conn.connected
    asyncio.run(go())


def test_connect_refused_is_one_clear_error():
    async def go():
        conn = BrokerConnection("127.0.0.1", dead_port())
        with pytest.raises(KafkaConnectionError, match="Connection to 127.0.0.1:.* failed: Connection refused"):
            await conn.connect()
    asyncio.run(go())


def test_every_call_goes_through_the_one_retry_policy(broker, topic, monkeypatch):
    """A connection lost under the first request of each kind: the Admin's request driver sends
    it again (the calls that used to fail at once included)."""
    from samsa.client.types import ConfigResource as CR
    from samsa.protocol.api_keys import ApiKey
    keys = {ApiKey.DESCRIBE_CONFIGS, ApiKey.DESCRIBE_LOG_DIRS, ApiKey.LIST_TRANSACTIONS, ApiKey.DESCRIBE_CLIENT_QUOTAS,
            ApiKey.INIT_PRODUCER_ID, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER, ApiKey.CREATE_PARTITIONS}
    lost: list[int] = []
    real = BrokerConnection.request

    async def flaky(self, api_key, body, **kw):
        if api_key in keys and api_key not in lost:
            lost.append(api_key)
            raise KafkaConnectionError(f"lost under {api_key} (injected)")
        return await real(self, api_key, body, **kw)
    monkeypatch.setattr(BrokerConnection, "request", flaky)
    with Admin({"bootstrap.servers": broker.bootstrap_servers, "retry.backoff.ms": 10}) as a:
        assert "retention.ms" in a.describe_configs([CR("topic", topic)])[CR("topic", topic)]
        assert a.describe_log_dirs()
        assert isinstance(a.list_transactions(), dict)
        assert a.describe_client_quotas() == []
        assert a.fence_producers(["driver-txn"])["driver-txn"].producer_id >= 0
        assert a.describe_cluster().brokers
        a.create_partitions({topic: 3})
    assert set(lost) == keys
