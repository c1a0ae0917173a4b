"""The leader's ISR expansion (ReplicaManager on a real log): who may be proposed back."""

from __future__ import annotations

import asyncio

from samsa.broker_config import BrokerConfig
from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from samsa.cluster.metadata_cache import MetadataCache
from samsa.cluster import replica_manager
from samsa.cluster.replica_manager import ReplicaManager
from samsa.storage import LogConfig, LogManager
from waiting import wait_until_async


def test_leader_proposes_only_registered_followers_for_the_isr(tmp_path):
    """A follower cut off from ZooKeeper (not registered) but still fetching is not proposed
    for the ISR — the controller would drop it again at once, round after round (issue 24:
    ~40 proposals in 16 s). Once it is registered again, its next fetch proposes it."""
    async def run() -> None:
        config = BrokerConfig({"broker.id": 0, "zookeeper.connect": "unused:2181", "log.dirs": str(tmp_path)})
        logs = LogManager([tmp_path], default_config=LogConfig())
        logs.load(lambda topic: LogConfig())
        alive = {0: BrokerInfo(0, "h", 1), 1: BrokerInfo(1, "h", 2)}
        replicas = ReplicaManager(config, logs, MetadataCache(config), replicated=True, broker_info=alive.get)
        proposals: list[list[int]] = []

        async def writer(topic: str, index: int, state: PartitionState) -> bool:
            proposals.append(list(state.isr))
            return True
        replicas.isr_writer = writer
        replicas.apply_topic(TopicInfo("t", b"\x01" * 16, {0: PartitionState([0, 1, 2], 0, 1, [0, 1])}))
        partition = replicas.partition("t", 0)
        for _ in range(5):  # broker 2 fetches at the log end, caught up, but is not registered
            replicas.follower_fetched(partition, 2, partition.log.log_end_offset)
            await asyncio.sleep(0)
        await asyncio.sleep(0.01)
        assert proposals == []
        alive[2] = BrokerInfo(2, "h", 3)  # registered again
        replicas.follower_fetched(partition, 2, partition.log.log_end_offset)
        await wait_until_async(lambda: proposals, "a proposal")
        assert proposals == [[0, 1, 2]]
        await replicas.stop()
        logs.close()
    asyncio.run(run())


def test_a_failed_expansion_is_proposed_again_in_the_same_partition_epoch(tmp_path, monkeypatch):
    """An expansion whose write failed (the active controller killed before its record committed:
    no newer partition state will ever be read) is proposed again after ISR_RETRY_S, not only
    when the partition epoch moves: the KRaft nemesis once left an ISR shrunk for good this way,
    acks=all writes refused with NOT_ENOUGH_REPLICAS. Within ISR_RETRY_S it is not proposed again."""
    monkeypatch.setattr(replica_manager, "ISR_RETRY_S", 0.2)

    async def run() -> None:
        config = BrokerConfig({"broker.id": 0, "zookeeper.connect": "unused:2181", "log.dirs": str(tmp_path)})
        logs = LogManager([tmp_path], default_config=LogConfig())
        logs.load(lambda topic: LogConfig())
        alive = {b: BrokerInfo(b, "h", b + 1) for b in (0, 1)}
        replicas = ReplicaManager(config, logs, MetadataCache(config), replicated=True, broker_info=alive.get)
        answers = [False, True]
        proposals: list[list[int]] = []

        async def writer(topic: str, index: int, state: PartitionState) -> bool:
            proposals.append(list(state.isr))
            return answers.pop(0)
        replicas.isr_writer = writer
        replicas.apply_topic(TopicInfo("t", b"\x01" * 16, {0: PartitionState([0, 1], 0, 1, [0])}))
        partition = replicas.partition("t", 0)

        def fetch() -> None:
            replicas.follower_fetched(partition, 1, partition.log.log_end_offset)
        fetch()
        await wait_until_async(lambda: not replicas._expanding, "the first proposal answered")
        assert proposals == [[0, 1]]
        fetch()  # at once: same epoch, refused a moment ago
        await asyncio.sleep(0.01)
        assert proposals == [[0, 1]]
        await asyncio.sleep(0.25)
        fetch()
        await wait_until_async(lambda: len(proposals) == 2, "the expansion proposed again")
        await replicas.stop()
        logs.close()
    asyncio.run(run())

