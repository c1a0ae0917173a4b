"""The group coordinator service against a fake host that has only what CoordinatorHost names,
and the broker's side of that seam."""

from __future__ import annotations

import asyncio
import inspect
from types import SimpleNamespace

import pytest

from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from samsa.coordinator.groups import GroupCoordinator, GroupState, OffsetCommitEntry, OffsetCommitRequest
from samsa.coordinator.groups.coordinator import CONFIG_KEYS, GroupCoordinatorHost
from samsa.coordinator.groups.persistence import GroupLoaded, OffsetLoaded, decode_entry
from samsa.coordinator.host import CoordinatorHost
from samsa.protocol import errors, records
from samsa.protocol.group_records import OFFSETS_TOPIC
from samsa.server.broker import BrokerServer
from samsa.broker_config import BrokerConfig


class FakePartition:
    def __init__(self, host: FakeHost) -> None:
        self.host = host

    def append(self, data, batches, now_ms: int):
        for r in records.iter_records(bytes(data)):
            self.host.written.append(decode_entry(r.key, r.value))
        return SimpleNamespace(last_offset=len(self.host.written) - 1)


class FakeHost:
    """Exactly the members of GroupCoordinatorHost (CoordinatorHost's, group_configs and latest_offset)."""

    broker_id = 1

    def __init__(self, **config) -> None:
        self.config = BrokerConfig({"offsets.topic.replication.factor": 1, "offsets.topic.num.partitions": 3,
                                    **config})
        self.topics: dict[str, TopicInfo] = {}
        self.written: list = []
        self.leading = True

    def partition(self, topic: str, index: int) -> FakePartition:
        if not self.leading:
            raise errors.NotLeaderOrFollowerError(f"not the leader of {topic}-{index}")
        return FakePartition(self)

    async def wait_for_high_watermark(self, partition, offset: int, timeout_ms: int, min_isr=None) -> None:
        assert partition.host is self and timeout_ms == self.config["offsets.commit.timeout.ms"]

    def alive_brokers(self) -> list[BrokerInfo]:
        return [BrokerInfo(1, "localhost", 9092)]

    def group_configs(self, group_id: str) -> dict[str, str]:
        return {}

    async def latest_offset(self, topic: str, partition: int) -> int:
        return 0

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, *, configs=None) -> TopicInfo:
        topic = TopicInfo(name, b"\0" * 16, {p: PartitionState([1], 1, isr=[1]) for p in range(num_partitions)},
                          dict(configs or {}))
        self.topics[name] = topic
        return topic


def _commit(coordinator: GroupCoordinator, *offsets: tuple[str, int, int], group: str = "g") -> list[int]:
    req = OffsetCommitRequest(group, [OffsetCommitEntry(t, p, o, metadata="m") for t, p, o in offsets])
    return asyncio.run(coordinator.commit(req))


def test_routing_creates_the_offsets_topic_and_names_its_leader():
    host = FakeHost()
    gc = GroupCoordinator(host)
    assert gc.coordinator_for("g") == BrokerInfo(1, "localhost", 9092)
    topic = host.topics[OFFSETS_TOPIC]
    assert (len(topic.partitions), topic.configs["cleanup.policy"]) == (3, "compact")


def test_coordinator_errors():
    host = FakeHost()
    gc = GroupCoordinator(host)
    assert gc.describe("g").error == errors.E_COORDINATOR_NOT_AVAILABLE  # no offsets topic yet
    gc.ensure_offsets_topic()
    assert gc.describe("").error == errors.E_INVALID_GROUP_ID
    host.leading = False
    assert gc.describe("g").error == errors.E_NOT_COORDINATOR
    assert gc.fetch_offsets("g", None) == (errors.E_NOT_COORDINATOR, [])


def test_commits_are_written_then_fetched_then_deleted_with_the_group():
    host = FakeHost()
    gc = GroupCoordinator(host)
    gc.ensure_offsets_topic()
    host.create_topic("t", 2, 1)
    assert _commit(gc, ("t", 0, 5), ("t", 7, 1), ("nope", 0, 1)) == \
        [0, errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_UNKNOWN_TOPIC_OR_PARTITION]
    assert [(w.topic, w.partition, w.offset.offset) for w in host.written] == [("t", 0, 5)]
    error, topics = gc.fetch_offsets("g", {"t": [0, 1]})
    assert error == 0 and [(p, o and o.offset) for p, o in topics[0][1]] == [(0, 5), (1, None)]
    assert [(g.group_id, g.state) for g in gc.list_groups(None)] == [("g", GroupState.EMPTY)]
    assert asyncio.run(gc.delete_groups(["g", "other"])) == [("g", 0), ("other", errors.E_GROUP_ID_NOT_FOUND)]
    assert host.written[-2:] == [OffsetLoaded("g", "t", 0, None), GroupLoaded("g", None)]
    assert gc.fetch_offsets("g", None) == (0, [])


def test_a_failed_write_fails_the_commit_and_keeps_nothing():
    host = FakeHost()
    gc = GroupCoordinator(host)
    gc.ensure_offsets_topic()
    host.create_topic("t", 1, 1)

    async def timed_out(*args, **kwargs):
        raise errors.RequestTimedOutError("not replicated")
    host.wait_for_high_watermark = timed_out
    assert _commit(gc, ("t", 0, 5)) == [errors.E_REQUEST_TIMED_OUT]
    assert gc.fetch_offsets("g", None) == (0, [])


def test_standalone_offsets_expire_after_retention():
    host = FakeHost(**{"offsets.retention.minutes": 1})
    gc = GroupCoordinator(host)
    gc.ensure_offsets_topic()
    host.create_topic("t", 1, 1)
    _commit(gc, ("t", 0, 5))
    committed_at = gc.offsets.get("g", ("t", 0)).commit_timestamp
    asyncio.run(gc.expire_offsets(committed_at + 30_000))
    assert gc.offsets.get("g", ("t", 0)) is not None
    asyncio.run(gc.expire_offsets(committed_at + 60_000))
    assert gc.offsets.get("g", ("t", 0)) is None and host.written[-1] == OffsetLoaded("g", "t", 0, None)


# ---------------------------------------------------------------- the broker's side of the seam

def _members(protocol: type) -> dict[str, object]:
    return {name: value for name, value in vars(protocol).items()
            if not name.startswith("_") and (callable(value) or isinstance(value, property))} | \
        {name: None for name in getattr(protocol, "__annotations__", {})}


@pytest.mark.parametrize("host", [FakeHost(), BrokerServer(BrokerConfig({})).groups.host], ids=["fake", "broker"])
def test_the_host_has_every_member_coordinator_host_names(host):
    members = {**_members(CoordinatorHost), **_members(GroupCoordinatorHost)}
    assert set(members) == {"broker_id", "config", "topics", "partition", "wait_for_high_watermark",
                            "alive_brokers", "create_topic", "group_configs", "latest_offset"}
    for name, declared in members.items():
        assert hasattr(host, name), name
        if inspect.isfunction(declared):
            wanted = inspect.signature(declared)
            params = inspect.signature(getattr(host, name)).parameters
            for p in list(wanted.parameters.values())[1:]:
                assert p.name in params, f"{name}() has no parameter {p.name}"
    for key in CONFIG_KEYS:
        host.config[key]


def test_offsets_topic_created_by_another_broker_meanwhile_is_coordinator_not_available():
    """On a cluster, another broker may create __consumer_offsets before this one has loaded it:
    FindCoordinator answers the retriable COORDINATOR_NOT_AVAILABLE, not TOPIC_ALREADY_EXISTS."""
    host = FakeHost()

    def created_elsewhere(name, *args, **kw):
        raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
    host.create_topic = created_elsewhere
    gc = GroupCoordinator(host)
    with pytest.raises(errors.CoordinatorNotAvailableError):
        gc.coordinator_for("g")
