"""Pure pieces of Samsa's share consumer (KIP-932): acknowledgement batches on the wire,
acknowledge types, the share consumer's config."""

from __future__ import annotations

import pytest

from samsa.client.config import ConfigError
from samsa.client.consumer_internals.async_share_consumer import AsyncShareConsumer, ack_type
from samsa.client.consumer_internals.share_fetcher import ACCEPT, GAP, REJECT, RELEASE, ack_batches
from samsa.client.share_consumer import AcknowledgeType


def test_ack_batches_are_runs_of_one_type():
    acks = {5: ACCEPT, 6: ACCEPT, 7: RELEASE, 9: ACCEPT, 10: GAP, 11: GAP, 3: REJECT}
    assert ack_batches(acks) == [
        {"first_offset": 3, "last_offset": 3, "acknowledge_types": [REJECT]},
        {"first_offset": 5, "last_offset": 6, "acknowledge_types": [ACCEPT]},
        {"first_offset": 7, "last_offset": 7, "acknowledge_types": [RELEASE]},
        {"first_offset": 9, "last_offset": 9, "acknowledge_types": [ACCEPT]},
        {"first_offset": 10, "last_offset": 11, "acknowledge_types": [GAP]},
    ]
    assert ack_batches({}) == []


def test_ack_types_by_name_value_or_enum():
    assert [ack_type(k) for k in ("accept", "RELEASE", "Reject")] == [1, 2, 3]
    assert [ack_type(k) for k in AcknowledgeType] == [1, 2, 3]
    assert ack_type(2) == RELEASE

    class Foreign:  # confluent-kafka's AcknowledgeType, Java's: an enum with a name
        name = "REJECT"
    assert ack_type(Foreign()) == REJECT
    for bad in (0, 4, "GAP", True, None):
        with pytest.raises(ValueError):
            ack_type(bad)


def test_share_consumer_config():
    with pytest.raises(ConfigError, match="auto.offset.reset is not supported for share consumers"):
        AsyncShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g", "auto.offset.reset": "earliest"})
    with pytest.raises(ConfigError):
        AsyncShareConsumer({"bootstrap.servers": "localhost:9092", "group.id": "g",
                            "share.acknowledgement.mode": "sometimes"})
    with pytest.raises(Exception, match="group.id"):
        AsyncShareConsumer({"bootstrap.servers": "localhost:9092"})


# ---------------------------------------------------------------- the fetcher, on stub brokers

import asyncio  # noqa: E402

from samsa.client.config import SHARE_CONSUMER_KEYS, ClientConfig  # noqa: E402
from samsa.client.consumer_internals.share_fetcher import ShareFetcher  # noqa: E402
from samsa.client.metadata import PartitionMetadata, TopicMetadata  # noqa: E402
from samsa.client.types import TopicPartition  # noqa: E402
from samsa.protocol.records import build_batch  # noqa: E402

TID = bytes(range(16))
T0, T1 = TopicPartition("t", 0), TopicPartition("t", 1)


class StubBroker:
    """One broker: records each request body, answers each partition from ``answer(tp)``."""

    def __init__(self, answer):
        self.requests: list[dict] = []
        self.answer = answer
        self.session: set[int] = set()  # the partitions of the member's share session here

    async def request(self, api_key, body, timeout_ms=None):
        self.requests.append(body)
        listed = {p["partition_index"] for t in body.get("topics", []) for p in t["partitions"]}
        forgotten = {p for t in body.get("forgotten_topics_data", []) for p in t["partitions"]}
        self.session = listed if body["share_session_epoch"] == 0 else (self.session | listed) - forgotten
        answered = listed if "forgotten_topics_data" not in body else self.session  # ShareAcknowledge: its own
        return {"error_code": 0, "acquisition_lock_timeout_ms": 30000, "node_endpoints": [],
                "responses": [{"topic_id": TID, "partitions": [
                    {"partition_index": p, "acknowledge_error_code": 0, **self.answer(TopicPartition("t", p))}
                    for p in sorted(answered)]}] if answered else []}


class StubCluster:
    def __init__(self, leaders: dict[int, int], brokers: dict[int, StubBroker]):
        self.brokers = brokers
        self.set_leaders(leaders)

    def set_leaders(self, leaders: dict[int, int]) -> None:
        self.topics = {"t": TopicMetadata("t", TID, False, {p: PartitionMetadata(p, n, 0, [n], [n], [])
                                                            for p, n in leaders.items()})}

    async def node(self, node_id):
        return self.brokers[node_id]


def records(offsets: range, count: int = 1) -> dict:
    return {"error_code": 0, "records": build_batch([(None, b"v%d" % o) for o in offsets], base_offset=offsets[0]),
            "acquired_records": [{"first_offset": offsets[0], "last_offset": offsets[-1], "delivery_count": count}]}


def test_fetcher_sessions_acknowledgements_and_a_leader_change():
    moved: list[bool] = []
    not_leader = {"error_code": 6, "records": None, "acquired_records": []}
    one = StubBroker(lambda tp: records(range(0, 3)) if tp == T0 else {"error_code": 0, "records": None,
                                                                        "acquired_records": []})
    two = StubBroker(lambda tp: records(range(3, 5), count=2))
    cluster = StubCluster({0: 1, 1: 1}, {1: one, 2: two})
    config = ClientConfig(SHARE_CONSUMER_KEYS, {"bootstrap.servers": "stub:9092", "retry.backoff.ms": 1})
    acked: list = []
    fetcher = ShareFetcher(cluster, "g", lambda: "m", config, lambda: moved.append(True),
                           lambda tp, offsets, error: acked.append((tp, sorted(offsets), error)))

    async def run():
        got = await fetcher.fetch(1, {T0, T1})
        assert [(a.tp, [r.offset for r in a.records], a.delivery) for a in got] == [(T0, [0, 1, 2],
                                                                                     {0: 1, 1: 1, 2: 1})]
        opening = one.requests[-1]
        assert opening["share_session_epoch"] == 0 and opening["forgotten_topics_data"] == []
        assert [p["partition_index"] for p in opening["topics"][0]["partitions"]] == [0, 1]
        # Acknowledgements ride on the next fetch, which names only the partitions that carry some.
        fetcher.acknowledge(T0, 0, 1)
        fetcher.acknowledge(T0, 1, 1)
        fetcher.acknowledge(T0, 2, 2)
        one.answer = lambda tp: not_leader if tp == T1 else {"error_code": 0, "records": None,
                                                             "acquired_records": []}
        await fetcher.fetch(1, {T0, T1})
        second = one.requests[-1]
        assert second["share_session_epoch"] == 1
        assert second["topics"] == [{"topic_id": TID, "partitions": [{"partition_index": 0, "acknowledgement_batches": [
            {"first_offset": 0, "last_offset": 1, "acknowledge_types": [1]},
            {"first_offset": 2, "last_offset": 2, "acknowledge_types": [2]}]}]}]
        assert acked == [(T0, [0, 1, 2], None)] and not fetcher.pending
        # Partition 1 answered NOT_LEADER_OR_FOLLOWER: metadata asked for; the new leader is broker 2.
        assert moved
        cluster.set_leaders({0: 1, 1: 2})
        assert fetcher.leaders({T0, T1}) == {1: {T0}, 2: {T1}}
        await fetcher.fetch(1, {T0})
        assert one.requests[-1]["forgotten_topics_data"] == [{"topic_id": TID, "partitions": [1]}]
        got = await fetcher.fetch(2, {T1})
        assert two.requests[-1]["share_session_epoch"] == 0  # a session of its own on the new leader
        assert [(a.tp, a.delivery) for a in got] == [(T1, {3: 2, 4: 2})]
        # Closing: the pending acknowledgement goes to its leader with epoch -1, every session is closed.
        fetcher.acknowledge(T1, 3, 3)
        await fetcher.close_sessions()
        assert two.requests[-1]["share_session_epoch"] == -1 and one.requests[-1]["share_session_epoch"] == -1
        assert two.requests[-1]["topics"][0]["partitions"][0]["acknowledgement_batches"] == [
            {"first_offset": 3, "last_offset": 3, "acknowledge_types": [3]}]
        assert not fetcher.sessions
    asyncio.run(run())
