"""The broker process: it wires the parts together and runs their lifecycle.

:class:`BrokerServer` is the composition root, as Kafka's KafkaServer: the config, the
metadata store, the logs (:class:`~samsa.storage.manager.LogManager`), this broker's view of
the topics (:class:`~samsa.cluster.metadata_cache.MetadataCache`), the partitions it hosts
(:class:`~samsa.cluster.replica_manager.ReplicaManager`), topic administration
(:class:`~samsa.cluster.topic_admin.TopicAdmin`), its part in the cluster (membership), the
group coordinator, and the listeners. Request handlers (``samsa.server.handlers``) reach
those parts through the :class:`~samsa.server.handlers.Services` a request carries.

Everything runs on one asyncio event loop; storage calls are synchronous page-cache
writes, so they run inline.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from pathlib import Path

from samsa.broker_config import BrokerConfig, ConfigError, parse_listener
from samsa.cluster.features import FinalizedFeatures, initial_levels
from samsa.cluster.kraft_cluster import KRaftCluster, KRaftMetadataStore
from samsa.cluster.membership import LocalCluster, ZooKeeperCluster
from samsa.clock import now_ms
from samsa.cluster.metadata import BrokerInfo, LocalMetadataStore, MetadataStore, TopicInfo
from samsa.cluster.metadata_cache import MetadataCache
from samsa.cluster.partition import Partition
from samsa.cluster.replica_manager import ReplicaManager
from samsa.cluster.topic_admin import TopicAdmin
from samsa.coordinator.groups import GroupCoordinator
from samsa.coordinator.share import ShareCoordinator, SharePersister
from samsa.coordinator.transactions import TransactionCoordinator, TransactionVerifier
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.server import kraft_mode
from samsa.server.dispatcher import Dispatcher
from samsa.server.fetch_sessions import FetchSessionCache
from samsa.server.metrics.counters import BrokerTopicStats
from samsa.security.acl import AclBinding, Authorizer
from samsa.security.quotas import ConnectionQuotas, QuotaManager
from samsa.security.scram import ScramCredential
from samsa.server.network import Connection, ConnectionLimits, close_idle, set_buffer_sizes
from samsa.server.security import listener_security
from samsa.server.share.manager import SharePartitionManager
from samsa.server.txn_markers import MarkerSender
from samsa.storage.descriptors import raise_open_file_limit
from samsa.storage.dir_lock import LogDirLocks
from samsa.storage.manager import LogManager

log = logging.getLogger(__name__)


def _halt(reason: str) -> None:
    """Every log directory failed: stop at once, as Kafka halts (Exit.halt(1)); nothing is left to serve."""
    logging.shutdown()
    os._exit(1)


class BrokerServer:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None):
        self.config = config
        self.broker_id = config.broker_id
        self._store = store
        self.store: MetadataStore
        self.logs: LogManager
        self.metadata = MetadataCache(config)
        self.replicas: ReplicaManager
        self.admin: TopicAdmin
        self.cluster: LocalCluster | ZooKeeperCluster | KRaftCluster
        self.kraft = None  # the metadata node (samsa.server.kraft_node) of a broker in a KRaft cluster
        self.dispatcher = Dispatcher(self)
        self.fetch_sessions = FetchSessionCache(config["max.incremental.fetch.session.cache.slots"],
                                                config["min.incremental.fetch.session.eviction.ms"])
        self.groups = GroupCoordinator(GroupCoordinatorHost(self))
        self.markers = MarkerSender(self)
        self.txn = TransactionCoordinator(TransactionCoordinatorHost(self))
        self.share = ShareCoordinator(ShareCoordinatorHost(self))
        self.groups.share_state = self.share.persister
        self.verifier = TransactionVerifier(self.txn, self.markers)
        self.servers: list[asyncio.AbstractServer] = []
        self.bound: list[tuple[str, str, int]] = []  # (listener name, host, port) as bound
        self._tasks: list[asyncio.Task] = []
        self._dir_locks: LogDirLocks | None = None
        self.started = asyncio.Event()
        self.stats: BrokerTopicStats | None = None  # set, with the dispatcher's times, by prometheus.listener
        self.metrics_endpoint = None
        self.loop_lag = None  # the event loop's lag probe (metrics/loop_lag), while metrics are on
        self.authorizer: Authorizer | None = None  # authorizer.class.name
        self.quotas: QuotaManager | None = None  # client quotas, from the metadata store
        self.features = FinalizedFeatures()  # the cluster's finalized feature levels (KIP-584), from the store
        self.shares: SharePartitionManager
        # How share partitions read and write their state (KIP-932): the share coordinator's
        # persister unless this is set before start().
        self.share_persister: SharePersister | None = None

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        dirs = [Path(d) for d in self.config.log_dirs]
        self._dir_locks = LogDirLocks(dirs)  # before anything reads or writes the directories
        before, now = raise_open_file_limit()
        if now != before:
            log.info("open file limit (ulimit -n) raised from %d to the hard limit, %d", before, now)
        else:
            log.info("open file limit (ulimit -n): %d", now)
        zookeeper = self.config["zookeeper.connect"]
        kraft_cluster_id = kraft_mode.check_start(self.config)  # a KRaft node Samsa cannot serve is refused
        if kraft_mode.follows_quorum(self.config):
            from samsa.server.kraft_node import MetadataNode
            self.kraft = MetadataNode(self.config)
            await self.kraft.start()
            log.info("waiting for the KRaft controller quorum (%s) and its metadata log",
                     ",".join(self.config["controller.quorum.voters"]) or
                     "bootstrap servers " + ",".join(self.config["controller.quorum.bootstrap.servers"]))
            await self.kraft.wait_caught_up()
            self.store = KRaftMetadataStore(self.kraft, kraft_cluster_id or "")
        else:
            self.store = self._store or await self._open_store(Path(self.config["metadata.log.dir"] or dirs[0]),
                                                               zookeeper, kraft_cluster_id)
        clustered = bool(zookeeper) or self.kraft is not None
        self.config.apply_dynamic(self.store.broker_configs(None), self.store.broker_configs(self.broker_id))
        self._load_features(kraft_mode.formatted_features(self.config) if kraft_cluster_id else None)
        if self.config["authorizer.class.name"]:
            self._start_authorizer(clustered)
        self._start_quotas(clustered)
        self.metadata.load(self.store.topics())
        self.logs = LogManager(
            dirs,
            default_config=self.metadata.log_config(""),
            recovery_threads_per_dir=self.config["num.recovery.threads.per.data.dir"],
            broker_id=self.broker_id,
            cluster_id=self.store.cluster_id,
        )
        t0 = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(None, lambda: self.logs.load(self.metadata.log_config))
        log.info("loaded %d logs in %.0f ms", len(list(self.logs.partitions())), (time.monotonic() - t0) * 1000)
        self.replicas = ReplicaManager(self.config, self.logs, self.metadata, replicated=clustered,
                                       broker_info=lambda broker_id: self.cluster.broker_info(broker_id))
        self.replicas.on_all_dirs_failed = _halt
        self.replicas.listeners.append(self.groups)
        self.replicas.listeners.append(self.txn)
        self.replicas.listeners.append(self.share)
        self.shares = SharePartitionManager(self.config, self.replicas, self.groups.share_group_config,
                                            self.share_persister or self.share.persister)
        self.replicas.listeners.append(self.shares)
        self.dispatcher.on_connection_closed.append(self.shares.connection_closed)
        if self.kraft is not None:
            self.cluster = KRaftCluster(self.config, self.kraft, self.store, self.replicas, self.advertised,
                                        previous_epoch=self.logs.previous_broker_epoch,
                                        supported_features=kraft_mode.supported_features(),
                                        log_dir_ids=kraft_mode.log_dir_ids(self.config))
        elif zookeeper:
            self.cluster = ZooKeeperCluster(self.config, self.store, self.replicas, self.advertised)
        else:
            self.cluster = LocalCluster(self.config, self.replicas, self.advertised)
        self.admin = TopicAdmin(self.config, self.store, self.metadata, self.replicas, self.alive_brokers)
        self.groups.start()
        self.txn.start()
        if self.config["prometheus.listener"]:
            await self._start_metrics(self.config["prometheus.listener"])
        # Bound first (registration advertises the bound port), served only once this broker
        # is registered and has read the cluster: until then it has no view to answer with.
        await self._listen()
        await self.cluster.start()
        self.replicas.report_offline()  # partitions of a log dir that failed at start-up: a cluster moves them
        for server in self.servers:
            await server.start_serving()
        self._tasks = [
            # On a worker thread: each visits every log (deleting segments, fsyncing), which takes
            # long with thousands of partitions; the event loop goes on serving meanwhile.
            asyncio.ensure_future(self._every(self.config["log.retention.check.interval.ms"],
                                              lambda: self.logs.run_retention(now_ms()), in_thread=True)),
            asyncio.ensure_future(self._every(min(self.config.flush_ms, 1000),
                                              lambda: self.logs.run_flush(now_ms()), in_thread=True)),
            asyncio.ensure_future(self._every(self.config["log.flush.offset.checkpoint.interval.ms"] or 60000,
                                              self.logs.checkpoint, in_thread=True)),
        ]
        max_idle_ms = self.config["connections.max.idle.ms"]
        if max_idle_ms > 0:
            self._tasks.append(asyncio.ensure_future(self._every(
                min(max(max_idle_ms // 4, 100), 10000),
                lambda: close_idle(self.dispatcher.connections, max_idle_ms))))
        if self.config["log.cleaner.enable"]:
            self._tasks.append(asyncio.ensure_future(self._every(
                self.config["log.cleaner.backoff.ms"], lambda: self.logs.run_cleaner(now_ms()), in_thread=True)))
        self.started.set()
        log.info("[KafkaServer id=%d] started, listening on %s", self.broker_id,
                 ", ".join(f"{n}://{h}:{p}" for n, h, p in self.bound))

    def _start_authorizer(self, clustered: bool) -> None:
        """The ACLs from the metadata store; in a cluster, read again on every change notification
        (an ACL added through any broker is enforced by all)."""
        self.authorizer = Authorizer(self.config["super.users"], self.config["allow.everyone.if.no.acl.found"])
        loop = asyncio.get_running_loop()

        def read() -> list[AclBinding]:
            out = []
            for r in self.store.acls():
                for e in r["acls"]:
                    try:
                        out.append(AclBinding.from_entry(r["resource_type"], r["pattern_type"], r["name"], e))
                    except (KeyError, ValueError):
                        log.warning("ignoring an ACL entry Samsa cannot read: %s %s", r, e)
            return out
        self.authorizer.load(read())
        log.info("authorizer: %d ACLs, super.users=%s, allow.everyone.if.no.acl.found=%s",
                 len(self.authorizer.bindings), self.config["super.users"] or "(none)",
                 self.config["allow.everyone.if.no.acl.found"])
        if clustered:
            authorizer = self.authorizer
            self.store.watch_acl_changes(lambda: loop.call_soon_threadsafe(authorizer.load, read()))

    def _start_quotas(self, clustered: bool) -> None:
        """Client quotas from the metadata store; in a cluster, read again on every change notification."""
        self.quotas = QuotaManager(self.config["quota.window.size.seconds"], self.config["quota.window.num"],
                                   self.config["controller.quota.window.size.seconds"],
                                   self.config["controller.quota.window.num"])
        self.reload_quotas()
        if clustered:
            loop = asyncio.get_running_loop()
            self.store.watch_config_changes(lambda: loop.call_soon_threadsafe(self.reload_quotas, self.store.entities()))

    def reload_quotas(self, entities: dict[str, dict[str, str]] | None = None) -> None:
        """Quotas as the store has them now; the dispatcher measures only while some quota is set."""
        self.quotas.load(self.store.entities() if entities is None else entities)
        self.dispatcher.quotas = self.quotas if self.quotas.active else None

    async def _start_metrics(self, listener: str) -> None:
        """Count on the request paths and serve /metrics (prometheus.listener)."""
        from prometheus_client import CollectorRegistry

        from samsa.server.metrics.collector import BrokerCollector
        from samsa.server.metrics.counters import LoopBusy, RequestTimes
        from samsa.server.metrics.endpoint import MetricsEndpoint
        from samsa.server.metrics.loop_lag import LoopLag
        self.stats = BrokerTopicStats()
        self.dispatcher.times = RequestTimes()
        busy = LoopBusy()
        busy.install(asyncio.get_running_loop())
        self.loop_lag = LoopLag()
        self.loop_lag.start(asyncio.get_running_loop())
        registry = CollectorRegistry(auto_describe=False)
        registry.register(BrokerCollector(self, self.stats, self.dispatcher.times, busy, self.loop_lag))
        self.metrics_endpoint = MetricsEndpoint(registry, listener)
        await self.metrics_endpoint.start()

    def _load_features(self, formatted: dict[str, int] | None) -> None:
        """The finalized feature levels (a new cluster's: those ``storage format`` wrote, else
        Samsa's defaults), then every change another broker writes (ZooKeeper's /feature)."""
        self.features.update(*self.store.ensure_features(initial_levels(formatted)))
        if isinstance(self.store, KRaftMetadataStore):  # the metadata image is the only source
            self.features.follow(self.store.features)
        watch = getattr(self.store, "watch_features", None)
        if watch is not None:
            watch(self.features.update)

    async def _open_store(self, first_dir: Path, zookeeper: str, cluster_id: str | None = None) -> MetadataStore:
        if not zookeeper:
            first_dir.mkdir(parents=True, exist_ok=True)
            return LocalMetadataStore(first_dir, cluster_id=cluster_id)
        from samsa.cluster.zookeeper import ZooKeeperMetadataStore
        session = self.config["zookeeper.session.timeout.ms"]
        return await asyncio.get_running_loop().run_in_executor(None, lambda: ZooKeeperMetadataStore(
            zookeeper, session_timeout_ms=session,
            connection_timeout_ms=self.config["zookeeper.connection.timeout.ms"]))

    def scram_credential(self, mechanism: str, user: str) -> ScramCredential | None:
        """A user's stored SCRAM credential (``/config/users/<user>``), read at each authentication."""
        text = self.store.entity_configs(f"users/{user}").get(mechanism)
        return ScramCredential.from_text(text) if text else None

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        limits = ConnectionLimits(self.config["socket.request.max.bytes"], self.config["queued.max.requests"],
                                  self.config["queued.max.request.bytes"])
        timed = self.dispatcher.times is not None
        try:
            counts: ConnectionQuotas | None = ConnectionQuotas(
                self.config["max.connections"], self.config["max.connections.per.ip"],
                self.config["max.connections.per.ip.overrides"] or "")
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if counts.unlimited:
            counts = None  # nothing counted per connection: the hot path stays as it was
        for listener in self.config.listeners:
            name, host, port = parse_listener(listener)
            if self.kraft is not None and name in self.config["controller.listener.names"]:
                continue  # the controller's, served by the metadata node
            security = listener_security(self.config, name, self.scram_credential)
            if security.protocol == "PLAINTEXT":
                security = None  # nothing to do per connection: the hot path stays as it was
            server = await loop.create_server(
                lambda name=name, security=security: Connection(self.dispatcher, limits, name, timed, security,
                                                                counts),
                host or None, port, reuse_address=True, backlog=512, start_serving=False)
            for sock in server.sockets:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                # the receive buffer only when configured: the OS's autotuned one took Produce
                # requests faster here than a fixed 100 KB window (BENCHMARKS.md, issue 33)
                set_buffer_sizes(sock, self.config["socket.send.buffer.bytes"],
                                 self.config["socket.receive.buffer.bytes"]
                                 if "socket.receive.buffer.bytes" in self.config.originals else -1)
            actual = server.sockets[0].getsockname()[1]
            self.servers.append(server)
            self.bound.append((name, host, actual))

    async def stop(self) -> None:
        if hasattr(self, "cluster"):
            if self.config["controlled.shutdown.enable"] and self.started.is_set():
                await self.cluster.controlled_shutdown()
            await self.cluster.stop()
        if hasattr(self, "replicas"):
            await self.replicas.stop()
        self.groups.stop()
        self.txn.stop()
        if hasattr(self, "shares"):
            self.shares.stop()
        self.markers.close()
        for task in self._tasks:
            task.cancel()
        for server in self.servers:
            server.close()
        if self.metrics_endpoint is not None:
            await self.metrics_endpoint.stop()
        if self.loop_lag is not None:
            self.loop_lag.stop()
        parked = [c.task for c in self.dispatcher.connections if c.task is not None]
        for conn in list(self.dispatcher.connections):
            conn.transport.close()
        for task in parked:
            task.cancel()
        await asyncio.gather(*parked, *self._tasks, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()
        if hasattr(self, "logs"):
            self.logs.close(broker_epoch=getattr(self.cluster, "epoch", -1) if self.kraft is not None else -1)
        if hasattr(self, "store"):
            self.store.close()
        if self.kraft is not None:
            await self.kraft.stop()
        if self._dir_locks is not None:
            self._dir_locks.release()
        log.info("[KafkaServer id=%d] shut down completed", self.broker_id)

    async def _every(self, interval_ms: int, fn, in_thread: bool = False) -> None:
        """Run ``fn`` every interval; on a worker thread when it may take long (the cleaner)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                if in_thread:
                    await loop.run_in_executor(None, fn)
                else:
                    fn()
            except Exception:
                log.exception("background task failed")

    # ---------------------------------------------------------------- cluster view

    def advertised(self) -> BrokerInfo:
        """This broker's endpoints as clients should reach them, one per advertised listener
        (``advertised.listeners``, else ``listeners``); host and port are the inter-broker
        listener's."""
        endpoints: dict[str, tuple[str, int]] = {}
        for listener in self.config.advertised_listeners:
            name, host, port = parse_listener(listener)
            if self.kraft is not None and name in self.config["controller.listener.names"]:
                continue
            bound = next(((h, p) for n, h, p in self.bound if n == name), None)
            if port == 0 and bound is not None:
                port = bound[1]
            if not host or host in ("0.0.0.0", "::"):
                bound_host = bound[0] if bound is not None else ""
                host = socket.gethostname() if bound_host in ("", "0.0.0.0", "::") else bound_host
            endpoints[name] = (host, port)
        inter = self.config.inter_broker_listener
        host, port = endpoints.get(inter) or next(iter(endpoints.values()))
        protocols = {name: self.config.security_protocol(name) for name in endpoints}
        return BrokerInfo(self.broker_id, host, port, self.config["broker.rack"], endpoints=endpoints,
                          protocols=protocols)

    def alive_brokers(self) -> list[BrokerInfo]:
        return self.cluster.alive_brokers()

    @property
    def controller_id(self) -> int:
        return self.cluster.controller_id


class GroupCoordinatorHost:
    """The broker as the group coordinator sees it (:class:`samsa.coordinator.host.CoordinatorHost`):
    the replica manager's partitions, the metadata cache's topics, topic creation, live brokers."""

    def __init__(self, server: BrokerServer):
        self._server = server

    @property
    def broker_id(self) -> int:
        return self._server.broker_id

    @property
    def config(self) -> BrokerConfig:
        return self._server.config

    @property
    def topics(self) -> dict[str, TopicInfo]:
        return self._server.metadata.topics

    def partition(self, topic: str, index: int) -> Partition:
        return self._server.replicas.partition(topic, index)

    async def wait_for_high_watermark(self, partition: Partition, offset: int, timeout_ms: int,
                                      min_isr: int | None = None) -> None:
        await self._server.replicas.wait_for_high_watermark(partition, offset, timeout_ms, min_isr)

    def alive_brokers(self) -> list[BrokerInfo]:
        return self._server.alive_brokers()

    def group_configs(self, group_id: str) -> dict[str, str]:
        return self._server.store.entity_configs(f"groups/{group_id}")

    async def latest_offset(self, topic: str, partition: int) -> int:
        server = self._server
        info = server.metadata.topics.get(topic)
        state = info.partitions.get(partition) if info else None
        if state is None:
            raise errors.UnknownTopicOrPartitionError()
        if state.leader == server.broker_id:
            return server.replicas.partition(topic, partition).high_watermark
        resp = await server.markers.request_broker(state.leader, ApiKey.LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": 0, "topics": [
                {"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}]}, min_version=1)
        p = resp["topics"][0]["partitions"][0]
        if p["error_code"]:
            raise errors.KafkaError(code=p["error_code"])
        return p["offset"]

    def create_topic(self, name: str, num_partitions: int, replication_factor: int, *,
                     configs: dict[str, str] | None = None) -> TopicInfo:
        return self._server.admin.create_topic(name, num_partitions, replication_factor, configs=configs)


class ShareCoordinatorHost(GroupCoordinatorHost):
    """The broker as the share coordinator sees it
    (:class:`samsa.coordinator.share.coordinator.ShareCoordinatorHost`): the group coordinator's
    host, and requests to other brokers on the kept inter-broker connections."""

    async def request_broker(self, broker_id: int, api_key: ApiKey, body: dict) -> dict:
        return await self._server.markers.request_broker(broker_id, api_key, body)


class TransactionCoordinatorHost(GroupCoordinatorHost):
    """The broker as the transaction coordinator sees it
    (:class:`samsa.coordinator.transactions.TransactionHost`): the group coordinator's host,
    producer ids, and marker writes at the partitions' leaders."""

    def allocate_producer_id(self) -> int:
        return self._server.admin.allocate_producer_id()

    def transaction_version(self) -> int:
        return self._server.features.level("transaction.version")

    async def write_txn_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                                partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return await self._server.markers.write(producer_id, producer_epoch, coordinator_epoch, commit, partitions)
