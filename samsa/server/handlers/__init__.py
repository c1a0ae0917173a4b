"""One module per Kafka API, each a thin function: decoded request in, response dict out.

A handler may return a dict (answered at once), an awaitable of a dict (answered when it
resolves, e.g. a long-poll fetch), or None (no response: acks=0 produce). It reaches the
broker's parts through the :class:`Services` of its request (``ctx.broker``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol

from samsa.broker_config import BrokerConfig
from samsa.cluster.features import FinalizedFeatures
from samsa.cluster.membership import LocalCluster, ZooKeeperCluster
from samsa.cluster.metadata import BrokerInfo, MetadataStore
from samsa.cluster.metadata_cache import MetadataCache
from samsa.cluster.replica_manager import ReplicaManager
from samsa.cluster.topic_admin import TopicAdmin
from samsa.coordinator.groups import GroupCoordinator
from samsa.coordinator.share import ShareCoordinator
from samsa.coordinator.transactions import TransactionCoordinator, TransactionVerifier
from samsa.protocol import api
from samsa.protocol.api_keys import ApiKey
from samsa.security.acl import Authorizer
from samsa.security.quotas import QuotaManager
from samsa.server.fetch_sessions import FetchSessionCache
from samsa.server.share.manager import SharePartitionManager
from samsa.server.metrics.counters import BrokerTopicStats
from samsa.storage.manager import LogManager


class Services(Protocol):
    """What the handlers may use of the broker (the server's BrokerServer is one)."""

    broker_id: int
    config: BrokerConfig
    store: MetadataStore
    logs: LogManager
    metadata: MetadataCache        # topics by name and id, effective topic configs
    replicas: ReplicaManager       # the partitions hosted here: append, read, wait, ISR
    admin: TopicAdmin              # create/delete/grow topics, alter configs, producer ids
    cluster: LocalCluster | ZooKeeperCluster  # live brokers, controller, elections, reassignments
    groups: GroupCoordinator
    fetch_sessions: FetchSessionCache  # incremental fetch sessions (KIP-227)
    shares: SharePartitionManager  # share partitions led here and share sessions (KIP-932)
    stats: BrokerTopicStats | None  # BrokerTopicMetrics, when the broker's metrics are on
    txn: TransactionCoordinator
    share: ShareCoordinator        # the share coordinator (KIP-932): __share_group_state, the share persister
    verifier: TransactionVerifier  # KIP-890: Produce and TxnOffsetCommit ask it about the transaction
    authorizer: Authorizer | None  # None without authorizer.class.name: every check passes
    quotas: QuotaManager | None    # client quotas (producer/consumer byte rates, request percentage, mutations)
    features: FinalizedFeatures    # the cluster's finalized feature levels and epoch (KIP-584)

    def reload_quotas(self) -> None: ...

    def alive_brokers(self) -> list[BrokerInfo]: ...

    @property
    def controller_id(self) -> int: ...


@dataclass(frozen=True)
class Handler:
    name: str
    fn: Callable
    min_version: int
    max_version: int


HANDLERS: dict[int, Handler] = {}


def handles(api_key: ApiKey, min_version: int | None = None, max_version: int | None = None):
    """Register a handler for the versions given (by default all the schema knows)."""
    spec = api.api(api_key)

    def register(fn: Callable) -> Callable:
        lo = spec.min_version if min_version is None else min_version
        hi = spec.max_version if max_version is None else max_version
        HANDLERS[api_key] = Handler(spec.name, fn, lo, hi)
        return fn
    return register


from samsa.server.handlers import (  # noqa: E402,F401  (registration side effects)
    acls,
    admin_configs,
    admin_topics,
    api_versions,
    client_quotas,
    cluster,
    fetch,
    groups,
    list_offsets,
    metadata,
    produce,
    producer_ids,
    replication,
    sasl,
    scram,
    share,
    share_state,
    transactions,
)
