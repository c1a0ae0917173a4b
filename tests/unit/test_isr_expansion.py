"""The leader's ISR expansion (ReplicaManager on a real log): who may be proposed back."""

from __future__ import annotations

import asyncio

from samsa.broker_config import BrokerConfig
from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from samsa.cluster.metadata_cache import MetadataCache
from samsa.cluster.replica_manager import ReplicaManager
from samsa.storage import LogConfig, LogManager


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
        await asyncio.sleep(0.01)
        assert proposals == [[0, 1, 2]]
        await replicas.stop()
        logs.close()
    asyncio.run(run())
