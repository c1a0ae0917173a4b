"""What a coordinator needs from the broker that hosts it.

A coordinator keeps its state in an internal topic it leads (``__consumer_offsets`` for
groups; ``__transaction_state`` for a transaction coordinator, later). It asks the broker
side for no more than :class:`CoordinatorHost` names: the partitions it leads, to append
to and wait on; the topics that exist; the live brokers; creating its internal topic; and
its config. The broker (``samsa.server``) hands it an object with these members; the
coordinator never imports ``samsa.server``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Iterator, Protocol

from samsa.cluster.metadata import BrokerInfo, TopicInfo
from samsa.cluster.partition import Partition
from samsa.protocol import batch, errors


class ConfigLookup(Protocol):
    """Broker config values by Kafka key (``config["offsets.commit.timeout.ms"]``), read when needed:
    dynamic configs change under a running coordinator."""

    def __getitem__(self, key: str, /) -> Any: ...


class CoordinatorHost(Protocol):
    """The broker side, as a coordinator sees it."""

    @property
    def broker_id(self) -> int: ...

    @property
    def config(self) -> ConfigLookup: ...

    @property
    def topics(self) -> Mapping[str, TopicInfo]:
        """Every topic of the cluster by name, with its partitions' replicas and leaders."""
        ...

    def partition(self, topic: str, index: int) -> Partition:
        """The partition this broker leads, or raises UnknownTopicOrPartitionError /
        NotLeaderOrFollowerError."""
        ...

    async def wait_for_high_watermark(self, partition: Partition, offset: int, timeout_ms: int,
                                      min_isr: int | None = None) -> None:
        """Return once ``partition`` has replicated up to ``offset``; raise NotLeaderOrFollowerError
        if leadership moves first, RequestTimedOutError after ``timeout_ms``."""
        ...

    def alive_brokers(self) -> list[BrokerInfo]: ...

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, *,
                     configs: dict[str, str] | None = None) -> TopicInfo:
        """Create an (internal) topic, or raise TopicAlreadyExistsError and the like."""
        ...


def java_string_hash(s: str) -> int:
    """Java's String.hashCode over UTF-16 code units, as a signed 32-bit int."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    """Which partition of its internal topic holds a coordinator's key (a group id, a
    transactional id, a share partition's ``group:topicId:partition``): Kafka's
    Utils.abs(key.hashCode) % partitions."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def ensure_internal_topic(host: CoordinatorHost, name: str, num_partitions: int, rf_key: str,
                          configs: dict[str, str]) -> None:
    """Create a coordinator's internal topic when a client first looks for a coordinator.

    While it cannot be made (too few brokers for ``rf_key``) or another broker made it a
    moment ago and this one has not loaded it yet, the client is told the retriable
    COORDINATOR_NOT_AVAILABLE, as it is while the topic's leaders are being elected."""
    if name in host.topics:
        return
    rf = host.config[rf_key]
    alive = len(host.alive_brokers())
    if rf > alive:
        raise errors.CoordinatorNotAvailableError(f"{rf_key} is {rf} but only {alive} broker(s) are alive")
    try:
        host.create_topic(name, num_partitions, rf, configs=configs)
    except errors.TopicAlreadyExistsError:
        raise errors.CoordinatorNotAvailableError(f"{name} is being created") from None
    except (errors.KafkaStorageError, errors.RequestTimedOutError) as e:  # the metadata store (KRaft: the
        # controller quorum) or every log dir cannot be written
        raise errors.CoordinatorNotAvailableError(f"{name} cannot be created now: {e.message}") from None


def log_chunks(partition: Partition) -> Iterator[tuple[bytes, int]]:
    """A coordinator's internal partition read from its log start to its end, as its state is
    loaded: ``(data, offset)``, whole batches read from ``offset`` (records below it in the first
    batch were in the chunk before and are to be skipped)."""
    plog = partition.log
    offset = plog.log_start_offset
    while offset < plog.log_end_offset:
        data = plog.read(offset, 1 << 20)
        if not data:
            return
        yield data, offset
        last = [h for _, h in batch.iter_headers(data)]
        if not last or last[-1].next_offset <= offset:
            return
        offset = last[-1].next_offset
