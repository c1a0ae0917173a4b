"""Writing transaction markers: at the partitions this broker leads, and (for the transaction
coordinator) at other brokers through WriteTxnMarkers. The kept connections to other brokers
also carry the transaction verifier's requests (:mod:`samsa.coordinator.transactions.verifier`).

A marker is a control batch the leader appends as it would a producer's batch, replicated as
acks=all. A marker on a ``__consumer_offsets`` partition also tells the group coordinator that
the producer's transactional offsets there commit or go (Kafka's order: after the append).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from samsa.client.connection import BrokerConnection
from samsa.clock import now_ms
from samsa.cluster.membership import LocalCluster, ZooKeeperCluster
from samsa.cluster.metadata_cache import MetadataCache
from samsa.cluster.replica_manager import ReplicaManager
from samsa.coordinator.groups import GroupCoordinator
from samsa.cluster.inter_broker import inter_broker_security
from samsa.protocol import batch, errors
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.control import build_marker
from samsa.protocol.group_records import OFFSETS_TOPIC


class MarkerBroker(Protocol):
    """What marker writing uses of the broker (the BrokerServer)."""

    broker_id: int
    metadata: MetadataCache
    replicas: ReplicaManager
    groups: GroupCoordinator
    cluster: LocalCluster | ZooKeeperCluster


log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
MARKER_TIMEOUT_MS = 30000


async def write_local_markers(broker: MarkerBroker, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                              commit: bool, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
    """Append a marker to each partition led here and wait until it is replicated; an error
    code per partition."""
    now = now_ms()
    results: dict[TopicPartition, int] = {}
    waits = []
    for tp in partitions:
        topic, index = tp
        try:
            partition = broker.replicas.partition(topic, index)
            data = build_marker(producer_id, producer_epoch, coordinator_epoch, commit, now)
            min_isr = broker.metadata.topic_config(topic)["min.insync.replicas"]
            info = broker.replicas.append(partition, data, batch.validate(data), now, min_isr)
            waits.append((tp, partition, info.last_offset + 1, min_isr))
            results[tp] = 0
        except errors.KafkaError as e:
            results[tp] = e.code

    async def wait(tp: TopicPartition, partition, offset: int, min_isr: int) -> None:
        try:
            await broker.replicas.wait_for_high_watermark(partition, offset, MARKER_TIMEOUT_MS, min_isr)
        except errors.KafkaError as e:
            results[tp] = e.code
            return
        if tp[0] == OFFSETS_TOPIC:
            broker.groups.complete_txn(producer_id, commit, tp[1])
    await asyncio.gather(*(wait(*w) for w in waits))
    return results


class MarkerSender:
    """The transaction coordinator's marker writes: local partitions directly, the others as
    WriteTxnMarkers requests to their leaders (one connection per broker, kept, which
    :meth:`request_broker` lends to the transaction verifier)."""

    def __init__(self, broker: MarkerBroker):
        self.broker = broker
        self._conns: dict[int, BrokerConnection] = {}

    async def write(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                    partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        broker = self.broker
        by_leader: dict[int, list[TopicPartition]] = {}
        results: dict[TopicPartition, int] = {}
        for tp in partitions:
            topic = broker.metadata.topics.get(tp[0])
            state = topic.partitions.get(tp[1]) if topic else None
            if state is None:
                results[tp] = errors.E_UNKNOWN_TOPIC_OR_PARTITION
            elif state.leader < 0:
                results[tp] = errors.E_NOT_LEADER_OR_FOLLOWER
            else:
                by_leader.setdefault(state.leader, []).append(tp)
        jobs = []
        for leader, tps in by_leader.items():
            if leader == broker.broker_id:
                jobs.append(write_local_markers(broker, producer_id, producer_epoch, coordinator_epoch, commit, tps))
            else:
                jobs.append(self._remote(leader, producer_id, producer_epoch, coordinator_epoch, commit, tps))
        for part in await asyncio.gather(*jobs):
            results.update(part)
        return results

    async def _remote(self, leader: int, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        topics: dict[str, list[int]] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)
        try:
            conn = await self._connection(leader)
            resp = await conn.request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch, "transaction_result": commit,
                "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}]})
        except (errors.KafkaError, OSError) as e:
            log.info("WriteTxnMarkers to broker %d failed: %r", leader, e)
            self._drop(leader)
            return {tp: errors.E_NOT_LEADER_OR_FOLLOWER for tp in partitions}
        out = {tp: errors.E_UNKNOWN_SERVER_ERROR for tp in partitions}
        for marker in resp["markers"]:
            for t in marker["topics"]:
                for p in t["partitions"]:
                    out[(t["name"], p["partition_index"])] = p["error_code"]
        return out

    async def request_broker(self, broker_id: int, api_key: ApiKey, body: dict, min_version: int = 0) -> dict:
        """One request to another broker on the kept connection (the transaction verifier's
        AddPartitionsToTxn); a failed connection is dropped and the error raised."""
        try:
            conn = await self._connection(broker_id)
            return await conn.request(api_key, body, min_version=min_version)
        except (errors.KafkaError, OSError):
            self._drop(broker_id)
            raise

    async def _connection(self, broker_id: int) -> BrokerConnection:
        conn = self._conns.get(broker_id)
        if conn is not None and conn.connected:
            return conn
        info = self.broker.cluster.broker_info(broker_id)
        if info is None:
            raise errors.BrokerNotAvailableError(f"broker {broker_id} is not alive")
        config = self.broker.config
        host, port = info.endpoint(config.inter_broker_listener) or (info.host, info.port)
        conn = BrokerConnection(host, port, client_id=f"broker-{self.broker.broker_id}-txn-markers",
                                request_timeout_ms=MARKER_TIMEOUT_MS, connect_timeout_ms=MARKER_TIMEOUT_MS,
                                security=inter_broker_security(config))
        await conn.connect()
        self._conns[broker_id] = conn
        return conn

    def _drop(self, broker_id: int) -> None:
        conn = self._conns.pop(broker_id, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for broker_id in list(self._conns):
            self._drop(broker_id)
