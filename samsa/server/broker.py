"""The broker: owns the config, the logs, the metadata store and the listeners.

Request handlers (``samsa.server.handlers``) stay thin and call the methods here.
Everything runs on one asyncio event loop; storage calls are synchronous page-cache
writes, so they run inline.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from pathlib import Path

from samsa.cluster.membership import LocalCluster, ZooKeeperCluster
from samsa.cluster.metadata import (BrokerInfo, LocalMetadataStore, MetadataStore, PartitionState,
                                    TopicExistsError, TopicInfo, new_topic_id)
from samsa.cluster.replica import Partition
from samsa.coordinator.coordinator import GroupCoordinator
from samsa.protocol import errors
from samsa.protocol.names import validate_topic_name
from samsa.server.config import (BROKER_KEYS, TOPIC_KEYS, BrokerConfig, ConfigError, parse_listener,
                                 parse_topic_config, parse_value)
from samsa.server.dispatcher import Dispatcher
from samsa.server.network import Connection
from samsa.storage.config import LogConfig
from samsa.storage.manager import LogManager
from samsa.timeouts import within

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000


def now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(self, config: BrokerConfig, store: MetadataStore | None = None):
        self.config = config
        self.broker_id = config.broker_id
        self._store = store
        self.store: MetadataStore
        self.logs: LogManager
        self.topics: dict[str, TopicInfo] = {}
        self.topic_ids: dict[bytes, str] = {}
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.dispatcher = Dispatcher(self)
        self.groups = GroupCoordinator(self)
        self.cluster: LocalCluster | ZooKeeperCluster
        self.servers: list[asyncio.AbstractServer] = []
        self.bound: list[tuple[str, str, int]] = []  # (listener name, host, port) as bound
        self._tasks: list[asyncio.Task] = []
        self._next_pid = 0
        self._pid_block_end = 0
        self.started = asyncio.Event()

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        dirs = [Path(d) for d in self.config.log_dirs]
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
        self.store = self._store or await self._open_store(dirs[0])
        self.config.apply_dynamic(self.store.broker_configs(None), self.store.broker_configs(self.broker_id))
        self.topics = self.store.topics()
        self.topic_ids = {t.topic_id: n for n, t in self.topics.items()}
        self.logs = LogManager(
            dirs,
            default_config=self.log_config_for({}),
            recovery_threads_per_dir=self.config["num.recovery.threads.per.data.dir"],
            broker_id=self.broker_id,
            cluster_id=self.store.cluster_id,
        )
        t0 = time.monotonic()
        await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.logs.load(lambda topic: self.log_config(topic)))
        log.info("loaded %d logs in %.0f ms", len(list(self.logs.partitions())), (time.monotonic() - t0) * 1000)
        self.groups.start()
        if self.cluster.replicated:
            await self._listen()  # registration in ZooKeeper advertises the bound port
            await self.cluster.start()
        else:
            await self.cluster.start()
            await self._listen()
        self._tasks = [
            asyncio.ensure_future(self._every(self.config["log.retention.check.interval.ms"],
                                              lambda: self.logs.run_retention(now_ms()))),
            asyncio.ensure_future(self._every(min(self.config.flush_ms, 1000),
                                              lambda: self.logs.run_flush(now_ms()))),
            asyncio.ensure_future(self._every(self.config["log.flush.offset.checkpoint.interval.ms"] or 60000,
                                              self.logs.checkpoint)),
        ]
        if self.config["log.cleaner.enable"]:
            self._tasks.append(asyncio.ensure_future(self._every(
                self.config["log.cleaner.backoff.ms"], lambda: self.logs.run_cleaner(now_ms()), in_thread=True)))
        self.started.set()
        log.info("[KafkaServer id=%d] started, listening on %s", self.broker_id,
                 ", ".join(f"{n}://{h}:{p}" for n, h, p in self.bound))

    async def _open_store(self, first_dir: Path) -> MetadataStore:
        connect = self.config["zookeeper.connect"]
        if not connect:
            self.cluster = LocalCluster(self)
            return LocalMetadataStore(first_dir)
        from samsa.cluster.zookeeper import ZooKeeperMetadataStore
        session = self.config["zookeeper.session.timeout.ms"]
        store = await asyncio.get_running_loop().run_in_executor(None, lambda: ZooKeeperMetadataStore(
            connect, session_timeout_ms=session, connection_timeout_ms=self.config["zookeeper.connection.timeout.ms"]))
        self.cluster = ZooKeeperCluster(self, store)
        return store

    async def _listen(self) -> None:
        loop = asyncio.get_running_loop()
        max_bytes = self.config["socket.request.max.bytes"]
        for listener in self.config.listeners:
            name, host, port = parse_listener(listener)
            server = await loop.create_server(
                lambda: Connection(self.dispatcher, max_bytes), host or None, port,
                reuse_address=True, backlog=512)
            for sock in server.sockets:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            actual = server.sockets[0].getsockname()[1]
            self.servers.append(server)
            self.bound.append((name, host, actual))

    async def stop(self) -> None:
        if hasattr(self, "cluster"):
            if self.config["controlled.shutdown.enable"] and self.started.is_set():
                await self.cluster.controlled_shutdown()
            await self.cluster.stop()
        self.groups.stop()
        for task in self._tasks:
            task.cancel()
        for server in self.servers:
            server.close()
        parked = [c.task for c in self.dispatcher.connections if c.task is not None]
        for conn in list(self.dispatcher.connections):
            conn.transport.close()
        for task in parked:
            task.cancel()
        await asyncio.gather(*parked, *self._tasks, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()
        if hasattr(self, "logs"):
            self.logs.close()
        if hasattr(self, "store"):
            self.store.close()
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
        """This broker's endpoint as clients should reach it (first advertised listener)."""
        name, host, port = parse_listener(self.config.advertised_listeners[0])
        for bound_name, bound_host, bound_port in self.bound:
            if bound_name == name and port == 0:
                port = bound_port
        if not host or host in ("0.0.0.0", "::"):
            host = socket.gethostname() if not self.bound or self.bound[0][1] in ("", "0.0.0.0", "::") else self.bound[0][1]
        return BrokerInfo(self.broker_id, host, port, self.config["broker.rack"])

    def alive_brokers(self) -> list[BrokerInfo]:
        return self.cluster.alive_brokers()

    async def wait_for_high_watermark(self, partition: Partition, offset: int, timeout_ms: int,
                                      min_isr: int | None = None) -> None:
        """Return once ``partition``'s high watermark reaches ``offset`` (replicated), or time out.

        With ``min_isr`` (acks=all), an ISR that shrank below it by then fails the wait
        with NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka answers.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            if not partition.is_leader or self.partitions.get((partition.topic, partition.index)) is not partition:
                raise errors.NotLeaderOrFollowerError(
                    f"broker {self.broker_id} stopped leading {partition} before the append was replicated")
            if partition.high_watermark >= offset:
                if min_isr is not None and len(partition.state.isr) < min_isr:
                    raise errors.NotEnoughReplicasAfterAppendError(
                        f"the ISR of {partition} shrank to {partition.state.isr}, below min.insync.replicas={min_isr}")
                return
            fut = loop.create_future()
            partition.watch(fut)
            try:
                await within(fut, max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                raise errors.RequestTimedOutError(
                    f"{partition.topic}-{partition.index} was not replicated within {timeout_ms} ms") from None
            finally:
                partition.unwatch(fut)

    @property
    def controller_id(self) -> int:
        return self.cluster.controller_id

    def partition(self, topic: str, index: int) -> Partition:
        """The hosted partition, or the Kafka error a client should get instead."""
        p = self.partitions.get((topic, index))
        if p is None:
            raise errors.UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")
        if not p.is_leader:
            raise errors.NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{index}")
        return p

    # ---------------------------------------------------------------- topic configs

    def topic_config(self, topic: str) -> dict[str, object]:
        """Effective value of every topic config: override, else the broker's default."""
        overrides = self.topics[topic].configs if topic in self.topics else {}
        return {name: (parse_topic_config(name, overrides[name]) if name in overrides
                       else self.config.topic_default(name))
                for name in TOPIC_KEYS}

    def log_config(self, topic: str) -> LogConfig:
        overrides = self.topics[topic].configs if topic in self.topics else {}
        return self.log_config_for(overrides)

    def log_config_for(self, overrides: dict[str, str]) -> LogConfig:
        def value(name: str):
            return parse_topic_config(name, overrides[name]) if name in overrides else self.config.topic_default(name)
        return LogConfig(
            segment_bytes=value("segment.bytes"),
            segment_ms=value("segment.ms"),
            retention_ms=value("retention.ms"),
            retention_bytes=value("retention.bytes"),
            cleanup_policy=",".join(value("cleanup.policy")),
            max_message_bytes=value("max.message.bytes"),
            message_timestamp_type=value("message.timestamp.type"),
            index_interval_bytes=value("index.interval.bytes"),
            flush_messages=value("flush.messages"),
            flush_ms=value("flush.ms"),
            file_delete_delay_ms=value("file.delete.delay.ms"),
            segment_index_bytes=value("segment.index.bytes"),
            delete_retention_ms=value("delete.retention.ms"),
            min_cleanable_dirty_ratio=value("min.cleanable.dirty.ratio"),
            min_compaction_lag_ms=value("min.compaction.lag.ms"),
            max_compaction_lag_ms=value("max.compaction.lag.ms"),
        )

    @staticmethod
    def validate_topic_configs(configs: dict[str, str]) -> None:
        for name, raw in configs.items():
            try:
                parse_topic_config(name, raw)
            except ConfigError as e:
                raise errors.InvalidConfigError(str(e)) from None

    # ---------------------------------------------------------------- topic admin

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: dict[int, list[int]] | None = None,
                     configs: dict[str, str] | None = None, validate_only: bool = False) -> TopicInfo:
        validate_topic_name(name)
        if name in self.topics:
            raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        configs = dict(configs or {})
        self.validate_topic_configs(configs)
        if assignments:
            if num_partitions not in (-1, len(assignments)) or replication_factor != -1:
                raise errors.InvalidRequestError(
                    "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time.")
            replicas = self._check_assignments(assignments, start=0)
        else:
            if num_partitions == -1:
                num_partitions = self.config["num.partitions"]
            if replication_factor == -1:
                replication_factor = self.config["default.replication.factor"]
            if num_partitions <= 0:
                raise errors.InvalidPartitionsError("Number of partitions must be larger than 0.")
            if replication_factor <= 0:
                raise errors.InvalidReplicationFactorError("Replication factor must be larger than 0.")
            alive = self.alive_brokers()
            if replication_factor > len(alive):
                raise errors.InvalidReplicationFactorError(
                    f"Unable to replicate the partition {replication_factor} time(s): "
                    f"The target replication factor of {replication_factor} cannot be reached because "
                    f"only {len(alive)} broker(s) are registered.")
            replicas = self.assign_replicas(num_partitions, replication_factor, start=0)
        topic = TopicInfo(name, new_topic_id(),
                          {p: PartitionState(replicas=r, leader=r[0], isr=list(r)) for p, r in replicas.items()},
                          configs)
        if validate_only:
            return topic
        try:
            self.store.create_topic(topic)
        except TopicExistsError:
            raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.") from None
        self.apply_topic(topic)
        log.info("created topic %s with %d partitions, replication factor %d", name,
                 len(topic.partitions), topic.replication_factor)
        return topic

    def auto_create_topic(self, name: str) -> TopicInfo | None:
        if not self.config["auto.create.topics.enable"]:
            return None
        try:
            return self.create_topic(name, -1, -1)
        except errors.TopicAlreadyExistsError:
            return self.topics[name]

    # ---------------------------------------------------------------- applying cluster state

    def apply_topic(self, topic: TopicInfo) -> None:
        """The topic as the metadata store has it now: host, lead, follow or drop partitions."""
        old = self.topics.get(topic.name)
        if old is not None and old.topic_id != topic.topic_id:
            self.remove_topic(topic.name)  # deleted and created again under the same name
            old = None
        self.topics[topic.name] = topic
        self.topic_ids[topic.topic_id] = topic.name
        for index, state in sorted(topic.partitions.items()):
            self.apply_partition(topic.name, index, state)
        if old is not None and old.configs != topic.configs:
            config = self.log_config(topic.name)
            for index in topic.partitions:
                p = self.partitions.get((topic.name, index))
                if p is not None:
                    p.log.update_config(config)

    def apply_partition(self, topic: str, index: int, state: PartitionState) -> None:
        key = (topic, index)
        p = self.partitions.get(key)
        if self.broker_id not in state.replicas:
            if p is not None:
                self._drop_partition(key, delete_log=True)
            return
        if p is None:
            plog = self.logs.get(topic, index)
            if plog is None:
                plog = self.logs.create(topic, index, self.log_config(topic))
                if self.cluster.replicated:
                    plog.set_high_watermark(0)
            elif self.cluster.replicated:
                plog.set_high_watermark(self.logs.hw_checkpoints.get(key, 0))
            p = self.partitions[key] = Partition(topic, index, plog, state, self.broker_id)
            was_leader, old = False, None
        else:
            if state.partition_epoch < p.state.partition_epoch:
                return  # an older read than the state already applied
            was_leader, old = p.is_leader, p.state
        if state.leader == self.broker_id:
            if not was_leader or old is None or old.leader_epoch != state.leader_epoch:
                if self.cluster.replicated:
                    self.cluster.fetchers.unfollow(key)
                    log.info("%s: leader in epoch %d, ISR %s", p, state.leader_epoch, state.isr)
                p.become_leader(state, now_ms())
                self.groups.on_leader(topic, index)
            else:
                p.state = state
                p.maybe_advance_high_watermark()
        else:
            changed = was_leader or old is None or (old.leader, old.leader_epoch) != (state.leader, state.leader_epoch)
            p.become_follower(state)
            if changed:
                self.groups.on_follower(topic, index)
                if self.cluster.replicated:
                    if state.leader >= 0:
                        log.info("%s: following broker %d in epoch %d", p, state.leader, state.leader_epoch)
                        self.cluster.fetchers.follow(p)
                    else:
                        self.cluster.fetchers.unfollow(key)

    def _drop_partition(self, key: tuple[str, int], delete_log: bool) -> None:
        p = self.partitions.pop(key, None)
        if p is None:
            return
        if self.cluster.replicated:
            self.cluster.fetchers.unfollow(key)
        self.groups.on_follower(*key)
        p.wake()
        if delete_log:
            self.logs.delete(*key)

    def remove_topic(self, name: str) -> None:
        """The topic is gone from the metadata store: stop hosting it and delete its logs."""
        topic = self.topics.pop(name, None)
        if topic is None:
            return
        self.topic_ids.pop(topic.topic_id, None)
        for index in topic.partitions:
            self._drop_partition((name, index), delete_log=True)
        log.info("deleted topic %s", name)

    def assign_replicas(self, count: int, rf: int, start: int) -> dict[int, list[int]]:
        """Round-robin over the live brokers, each partition's replicas on distinct brokers.

        With ``broker.rack`` set, the brokers are ordered alternating between racks, so
        consecutive replicas land on different racks.
        """
        brokers = sorted(self.alive_brokers(), key=lambda b: b.id)
        racks: dict[str | None, list[int]] = {}
        for b in brokers:
            racks.setdefault(b.rack, []).append(b.id)
        ids = []
        columns = [racks[r] for r in sorted(racks, key=lambda r: r or "")]
        for i in range(max(len(c) for c in columns)):
            ids += [c[i] for c in columns if i < len(c)]
        return {start + i: [ids[(start + i + j) % len(ids)] for j in range(rf)] for i in range(count)}

    def _check_assignments(self, assignments: dict[int, list[int]], start: int) -> dict[int, list[int]]:
        alive = {b.id for b in self.alive_brokers()}
        sizes = {len(r) for r in assignments.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise errors.InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
        for p, r in assignments.items():
            if len(set(r)) != len(r):
                raise errors.InvalidReplicaAssignmentError(f"Duplicate brokers not allowed in replica assignment: {r}")
            if not set(r) <= alive:
                raise errors.InvalidReplicaAssignmentError(f"Unknown broker(s) in replica assignment: {r}")
        if sorted(assignments) != list(range(start, start + len(assignments))):
            raise errors.InvalidReplicaAssignmentError("Partitions should be a consecutive 0-based integer sequence")
        return assignments

    def delete_topic(self, name: str) -> None:
        if not self.config["delete.topic.enable"]:
            raise errors.TopicDeletionDisabledError("Topic deletion is disabled.")
        topic = self.topics.get(name)
        if topic is None:
            raise errors.UnknownTopicOrPartitionError(f"Topic {name} does not exist")
        self.store.delete_topic(name)
        self.remove_topic(name)

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                          validate_only: bool) -> None:
        topic = self.topics.get(name)
        if topic is None:
            raise errors.UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count < current:
            raise errors.InvalidPartitionsError(
                f"Topic currently has {current} partitions, {count} would not be an increase.")
        if count == current:
            raise errors.InvalidPartitionsError(f"Topic already has {current} partitions.")
        added = count - current
        if assignments:
            if len(assignments) != added:
                raise errors.InvalidReplicaAssignmentError(
                    f"Increasing the number of partitions by {added} but {len(assignments)} assignments provided.")
            replicas = self._check_assignments({current + i: r for i, r in enumerate(assignments)}, start=current)
        else:
            replicas = self.assign_replicas(added, topic.replication_factor, start=current)
        if validate_only:
            return
        for p, r in replicas.items():
            topic.partitions[p] = PartitionState(replicas=r, leader=r[0], isr=list(r))
        self.store.put_assignment(topic)
        self.apply_topic(topic)
        log.info("topic %s now has %d partitions", name, count)

    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool) -> None:
        """Replace the topic's overrides with ``configs`` (AlterConfigs semantics)."""
        topic = self.topics.get(name)
        if topic is None:
            raise errors.UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        self.validate_topic_configs(configs)
        if validate_only:
            return
        topic.configs = dict(configs)
        self.store.put_topic_configs(name, topic.configs)
        config = self.log_config(name)
        for index in topic.partitions:
            p = self.partitions.get((name, index))
            if p is not None:
                p.log.update_config(config)

    def alter_broker_configs(self, broker_id: int | None, configs: dict[str, str], validate_only: bool) -> None:
        for key, raw in configs.items():
            spec = BROKER_KEYS.get(key)
            if spec is None or not spec.dynamic:
                raise errors.InvalidConfigError(f"Cannot update these configs dynamically: {{{key}}}")
            try:
                parse_value(spec, raw)
            except ConfigError as e:
                raise errors.InvalidConfigError(str(e)) from None
        if validate_only:
            return
        self.store.put_broker_configs(broker_id, configs)
        self.config.apply_dynamic(self.store.broker_configs(None), self.store.broker_configs(self.broker_id))
        configs = {topic: self.log_config(topic) for topic in self.topics}
        for (topic, _), partition in self.partitions.items():
            partition.log.update_config(configs[topic])

    # ---------------------------------------------------------------- producer ids

    def allocate_producer_id(self) -> int:
        if self._next_pid >= self._pid_block_end:
            self._next_pid = self.store.next_producer_id_block(PRODUCER_ID_BLOCK)
            self._pid_block_end = self._next_pid + PRODUCER_ID_BLOCK
        pid = self._next_pid
        self._next_pid += 1
        return pid
