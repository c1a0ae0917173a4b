"""The partitions this broker hosts, as Kafka's ReplicaManager keeps them.

It applies the cluster's partition states (lead, follow, or drop a partition), appends to
the partitions it leads with the acks and ``min.insync.replicas`` checks, moves high
watermarks as followers fetch, grows and shrinks ISRs, parks acks=all produces and
long-poll fetches until a partition moves, and runs the follower fetchers. The request
handlers and the coordinators reach the logs only through it.

ISR changes are proposed, not made here: the cluster membership writes them to the metadata
store (``isr_writer``) and applies what was written, so every broker sees the same ISR.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, replace
from typing import Awaitable, Callable, Iterable, Iterator, Protocol

from samsa.broker_config import BrokerConfig
from samsa.clock import now_ms
from samsa.cluster.metadata import BrokerInfo, PartitionState, TopicInfo, describe_error
from samsa.cluster.metadata_cache import MetadataCache
from samsa.cluster.partition import Partition, start_leader_epoch
from samsa.cluster.replica_fetcher import ReplicaFetcherManager
from samsa.protocol import errors
from samsa.protocol.batch import BatchHeader
from samsa.storage.log import AppendInfo
from samsa.storage.manager import LogManager
from samsa.timeouts import within

log = logging.getLogger(__name__)

# The longest the event loop applies a big topic's partitions before serving other clients.
APPLY_SLICE_S = 0.01
# How long a follower's ISR expansion that was refused (or whose write failed) waits before it is
# proposed again in the same partition epoch (a newer epoch read proposes it at once).
ISR_RETRY_S = 1.0

IsrWriter = Callable[[str, int, PartitionState], Awaitable[bool]]


class LeadershipListener(Protocol):
    """Told when this broker starts or stops leading a partition (the group coordinator is one)."""

    def on_leader(self, topic: str, index: int) -> None: ...
    def on_follower(self, topic: str, index: int) -> None: ...


@dataclass(frozen=True)
class PartitionMetrics:
    """What the broker's metrics read of one hosted partition."""

    topic: str
    index: int
    leader: bool
    isr: int
    replicas: int
    high_watermark: int
    size_bytes: int
    segments: int
    log_start_offset: int
    log_end_offset: int


@dataclass(frozen=True)
class ReplicaMetrics:
    """The replica manager's state as the broker's metrics show it (ReplicaManager, Log)."""

    partitions: list[PartitionMetrics]  # sorted by (topic, index)
    isr_shrinks: int
    isr_expands: int


class ReplicaManager:
    def __init__(self, config: BrokerConfig, logs: LogManager, cache: MetadataCache, *, replicated: bool,
                 broker_info: Callable[[int], BrokerInfo | None]):
        self.config = config
        self.broker_id = config.broker_id
        self.logs = logs
        self.cache = cache
        self.replicated = replicated  # a ZooKeeper cluster: followers, fetchers, ISR changes
        self.partitions: dict[tuple[str, int], Partition] = {}
        # topics being removed in slices (remove_topic_off_loop): their steps, set when done
        self._removals: dict[str, tuple[Iterator[None], asyncio.Event]] = {}
        self.broker_info = broker_info  # a live (registered) broker's address, or None
        self.fetchers = ReplicaFetcherManager(config, broker_info, logs.io) if replicated else None
        # KIP-112: told (topic, partition) of each partition led or followed here whose log dir
        # failed (a cluster moves their leadership away); and what to do when every dir failed.
        self.on_offline: Callable[[list[tuple[str, int]]], None] | None = None
        self.on_all_dirs_failed: Callable[[str], None] | None = None
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        logs.on_dir_failure = self._dir_failed
        self.listeners: list[LeadershipListener] = []
        self.isr_writer: IsrWriter | None = None  # set by the cluster membership of a replicated broker
        self._expanding: set[tuple[str, int, int]] = set()
        # (topic, partition, follower) -> the partition epoch an expansion was refused (or failed)
        # in, and when it may be proposed again in that epoch: the state is likely stale, so wait
        # for it to be read again; but not for ever, since a failed write (a controller gone
        # before its record committed) brings no newer state.
        self._refused_in: dict[tuple[str, int, int], tuple[int, float]] = {}
        self.isr_shrinks = 0  # ISR changes of partitions led here, whoever wrote them (the broker's metrics)
        self.isr_expands = 0

    async def stop(self) -> None:
        if self.fetchers is not None:
            await self.fetchers.stop()

    def metrics(self) -> ReplicaMetrics:
        """A snapshot of the hosted partitions for the broker's metrics."""
        out = []
        for (topic, index), p in sorted(self.partitions.items()):
            plog = p.log
            out.append(PartitionMetrics(topic, index, p.is_leader, len(p.state.isr), len(p.state.replicas),
                                        p.high_watermark, plog.size_bytes(), plog.num_segments,
                                        plog.log_start_offset, plog.log_end_offset))
        return ReplicaMetrics(out, self.isr_shrinks, self.isr_expands)

    # ---------------------------------------------------------------- lookups

    def partition(self, topic: str, index: int) -> Partition:
        """The partition this broker leads, or the Kafka error a client should get instead."""
        p = self.partitions.get((topic, index))
        if p is None and self.logs.is_offline(topic, index):
            raise errors.KafkaStorageError(f"Partition {topic}-{index} is in an offline log directory")
        if p is None:
            raise errors.UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")
        if not p.is_leader:
            raise errors.NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{index}")
        return p

    def readable_partition(self, topic: str, index: int) -> Partition:
        """A partition a consumer may read here (KIP-392): led here, or followed here (a
        follower serves consumers up to its high watermark); else the Kafka error."""
        p = self.partitions.get((topic, index))
        if p is None:
            raise errors.UnknownTopicOrPartitionError(f"{topic}-{index} is not hosted here")
        if not p.is_leader and (p.state.leader < 0 or self.broker_id not in p.state.replicas):
            raise errors.NotLeaderOrFollowerError(f"broker {self.broker_id} is not a replica of {topic}-{index}")
        return p

    # ---------------------------------------------------------------- applying cluster state

    def apply_topic(self, topic: TopicInfo) -> None:
        """The topic as the metadata store has it now: host, lead, follow or drop partitions."""
        for _ in self._applying(topic):
            pass

    def _applying(self, topic: TopicInfo) -> Iterator[None]:
        """:meth:`apply_topic` one partition at a time (a pause after each); it stops when the
        topic is deleted or replaced meanwhile."""
        self._finish_removal(topic.name)
        old = self.cache.topics.get(topic.name)
        if old is not None and old.topic_id != topic.topic_id:
            self.remove_topic(topic.name)  # deleted and created again under the same name
            old = None
        self.cache.put(topic)
        for index, state in sorted(topic.partitions.items()):
            current = self.cache.topics.get(topic.name)
            if current is None or current.topic_id != topic.topic_id:
                return
            self.apply_partition(topic.name, index, state)
            yield
        if old is not None and old.configs != topic.configs:
            self.update_log_configs([topic.name])

    async def apply_topic_off_loop(self, topic: TopicInfo) -> None:
        """:meth:`apply_topic` without stalling the event loop: the files of partitions new to
        this broker made on a worker thread first (their directories, segments, indexes and,
        where this broker leads, the leader-epoch checkpoint), then the partitions applied on
        the loop in slices of at most APPLY_SLICE_S, the loop serving every other client between."""
        config = self.cache.log_config_of(topic.configs)
        missing = [(i, state) for i, state in sorted(topic.partitions.items())
                   if self.broker_id in state.replicas and self.logs.get(topic.name, i) is None]
        loop = asyncio.get_running_loop()
        if missing:
            await loop.run_in_executor(None, self._make_logs, topic.name, missing, config)
        deadline = loop.time() + APPLY_SLICE_S
        for _ in self._applying(topic):
            if loop.time() >= deadline:
                await asyncio.sleep(0)
                deadline = loop.time() + APPLY_SLICE_S

    def _make_logs(self, topic: str, partitions: list[tuple[int, PartitionState]], config) -> None:
        """On a worker thread: the logs of new partitions, the epoch of those this broker will lead started."""
        for index, state in partitions:
            plog = self.logs.create(topic, index, config)
            if state.leader == self.broker_id:
                start_leader_epoch(plog, state)

    def apply_partition(self, topic: str, index: int, state: PartitionState) -> None:
        key = (topic, index)
        p = self.partitions.get(key)
        if self.broker_id not in state.replicas:
            if p is not None:
                self._drop_partition(key)
            return
        if p is None and self.logs.is_offline(topic, index):
            return  # its log dir failed: neither led nor followed here until it is back (a restart)
        if p is None:
            plog = self.logs.get(topic, index)
            if plog is None:
                plog = self.logs.create(topic, index, self.cache.log_config(topic))
                if self.replicated:
                    plog.set_high_watermark(0)
            elif self.replicated:
                plog.set_high_watermark(self.logs.hw_checkpoints.get(key, 0))
            p = self.partitions[key] = Partition(topic, index, plog, state, self.broker_id)
            was_leader, old = False, None
        else:
            if state.partition_epoch < p.state.partition_epoch:
                return  # an older read than the state already applied
            was_leader, old = p.is_leader, p.state
        if state.leader == self.broker_id:
            if was_leader and old is not None:
                self._count_isr_change(old.isr, state.isr)
            if not was_leader or old is None or old.leader_epoch != state.leader_epoch:
                if self.fetchers is not None:
                    self.fetchers.unfollow(key)
                    log.info("%s: leader in epoch %d, ISR %s", p, state.leader_epoch, state.isr)
                p.become_leader(state, now_ms())
                for listener in self.listeners:
                    listener.on_leader(topic, index)
            else:
                p.state = state
                p.maybe_advance_high_watermark()
        else:
            changed = was_leader or old is None or (old.leader, old.leader_epoch) != (state.leader, state.leader_epoch)
            p.become_follower(state)
            if changed:
                for listener in self.listeners:
                    listener.on_follower(topic, index)
                if self.fetchers is not None:
                    if state.leader >= 0:
                        log.info("%s: following broker %d in epoch %d", p, state.leader, state.leader_epoch)
                        self.fetchers.follow(p)
                    else:
                        self.fetchers.unfollow(key)

    def _dir_failed(self, dir, reason: str, keys: list[tuple[str, int]]) -> None:
        """A log dir went offline (LogManager, maybe on a worker thread): stop leading and following
        its partitions here, answer their parked requests, and let the cluster move them."""
        if self._loop is not None and not self._on_loop():
            self._loop.call_soon_threadsafe(self._dir_failed, dir, reason, keys)
            return
        gone = []
        for key in keys:
            p = self.partitions.pop(key, None)
            if p is None:
                continue
            gone.append(key)
            if self.fetchers is not None:
                self.fetchers.unfollow(key)
            for listener in self.listeners:
                listener.on_follower(*key)
            p.wake()
        if gone and self.on_offline is not None:
            self.on_offline(gone)
        if not self.logs.online_dirs:
            why = (f"all log dirs in {', '.join(map(str, self.logs.log_dirs))} have failed "
                   f"(last: {dir}: {reason})")
            log.error("Shutdown broker because %s", why)
            if self.on_all_dirs_failed is not None:
                self.on_all_dirs_failed(why)

    def report_offline(self) -> None:
        """Once the cluster is joined: the partitions found in log dirs that failed while loading."""
        keys = sorted(k for k in self.logs.offline_partitions if k[0] in self.cache.topics)
        if keys and self.on_offline is not None:
            self.on_offline(keys)

    def _on_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False

    def _count_isr_change(self, old: list[int], new: list[int]) -> None:
        """The ISR of a partition led here changed (its leader or the controller wrote it)."""
        before, after = set(old), set(new)
        if after < before:
            self.isr_shrinks += 1
        elif after > before:
            self.isr_expands += 1

    def remove_topic(self, name: str) -> None:
        """The topic is gone from the metadata store: stop hosting it and delete its logs."""
        self._finish_removal(name)  # an earlier removal of the name, still going
        for _ in self._removing(name):
            pass

    def remove_topic_off_loop(self, name: str) -> Awaitable[None]:
        """:meth:`remove_topic` in slices of at most APPLY_SLICE_S of the event loop (the files
        themselves are removed on the log manager's thread); the topic is gone from the cache
        at once. Whatever applies the name again meanwhile finishes this removal first; a
        second removal of the same topic (a metadata watch after the request) waits for it."""
        pending = self._removals.get(name)
        if pending is not None and name not in self.cache.topics:
            return pending[1].wait()
        self._finish_removal(name)
        steps = self._removing(name)
        next(steps, None)
        entry = self._removals[name] = (steps, asyncio.Event())
        return self._remove_in_slices(name, entry)

    async def _remove_in_slices(self, name: str, entry: tuple[Iterator[None], asyncio.Event]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + APPLY_SLICE_S
        try:
            for _ in entry[0]:
                if loop.time() >= deadline:
                    await asyncio.sleep(0)
                    deadline = loop.time() + APPLY_SLICE_S
        finally:
            if self._removals.get(name) is entry:
                del self._removals[name]
            entry[1].set()

    def _finish_removal(self, name: str) -> None:
        entry = self._removals.pop(name, None)
        if entry is not None:
            for _ in entry[0]:
                pass
            entry[1].set()

    def _removing(self, name: str) -> Iterator[None]:
        topic = self.cache.pop(name)
        if topic is None:
            return
        for index in topic.partitions:
            self._drop_partition((name, index))
            yield
        log.info("deleted topic %s", name)

    def _drop_partition(self, key: tuple[str, int]) -> None:
        p = self.partitions.pop(key, None)
        if p is None:
            return
        if self.fetchers is not None:
            self.fetchers.unfollow(key)
        for listener in self.listeners:
            listener.on_follower(*key)
        p.wake()
        self.logs.delete(*key)

    def update_log_configs(self, topics: Iterable[str] | None = None) -> None:
        """Topic or broker configs changed: hand the hosted logs their new LogConfig."""
        configs = {t: self.cache.log_config(t) for t in (self.cache.topics if topics is None else topics)}
        for (topic, _), p in self.partitions.items():
            if topic in configs:
                p.log.update_config(configs[topic])

    # ---------------------------------------------------------------- the leader's appends

    def append(self, partition: Partition, records, batches: list[tuple[int, BatchHeader]], now: int,
               min_isr: int | None) -> AppendInfo:
        """Append validated batches to a partition this broker leads. With ``min_isr`` (acks=all,
        the topic's ``min.insync.replicas``): NOT_ENOUGH_REPLICAS if the ISR is smaller."""
        if min_isr is not None and len(partition.state.isr) < min_isr:
            raise errors.NotEnoughReplicasError(
                f"the ISR of {partition} has {len(partition.state.isr)} replicas, min.insync.replicas is {min_isr}")
        try:
            return partition.append(records, batches, now)
        except (OSError, errors.KafkaStorageError) as e:  # KIP-112: its log dir goes offline
            raise self.logs.failed(partition.log, e) from e

    async def wait_for_high_watermark(self, partition: Partition, offset: int, timeout_ms: int,
                                      min_isr: int | None = None) -> None:
        """Return once ``partition``'s high watermark reaches ``offset`` (replicated), or time out.

        With ``min_isr`` (acks=all), an ISR that shrank below it by then fails the wait
        with NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka answers.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        while True:
            if self.logs.is_offline(partition.topic, partition.index):
                raise errors.KafkaStorageError(f"Partition {partition} went offline with its log directory")
            if not partition.is_leader or self.partitions.get((partition.topic, partition.index)) is not partition:
                raise errors.NotLeaderOrFollowerError(
                    f"broker {self.broker_id} stopped leading {partition} before the append was replicated")
            if partition.high_watermark >= offset:
                if min_isr is not None and len(partition.state.isr) < min_isr:
                    raise errors.NotEnoughReplicasAfterAppendError(
                        f"the ISR of {partition} shrank to {partition.state.isr}, below min.insync.replicas={min_isr}")
                return
            try:
                await self.wait_for_change([partition], max(deadline - loop.time(), 0))
            except asyncio.TimeoutError:
                raise errors.RequestTimedOutError(
                    f"{partition.topic}-{partition.index} was not replicated within {timeout_ms} ms") from None

    @staticmethod
    async def wait_for_change(partitions: list[Partition], timeout_s: float) -> None:
        """Until the next append, high-watermark or role change of any of ``partitions``
        (a long-poll fetch, a parked acks=all produce); asyncio.TimeoutError after ``timeout_s``."""
        await ReplicaManager.wait_watched(ReplicaManager.watch_changes(partitions), partitions, timeout_s)

    @staticmethod
    def watch_changes(partitions: list[Partition]) -> asyncio.Future:
        """A future resolved by the next change of any of ``partitions``, watching from now on
        (a handler registers it before it returns its parked part, so no change falls between)."""
        fut = asyncio.get_running_loop().create_future()
        for p in partitions:
            p.watch(fut)
        return fut

    @staticmethod
    async def wait_watched(fut: asyncio.Future, partitions: list[Partition], timeout_s: float) -> None:
        """Wait for ``fut`` of :meth:`watch_changes`; asyncio.TimeoutError after ``timeout_s``."""
        try:
            await within(fut, timeout_s)
        finally:
            for p in partitions:
                p.unwatch(fut)

    # ---------------------------------------------------------------- followers and the ISR

    def follower_fetched(self, partition: Partition, replica_id: int, offset: int) -> None:
        """A follower's fetch offset is its log end: track it, move the HW, maybe grow the ISR."""
        partition.record_follower_fetch(replica_id, offset, now_ms())
        if replica_id not in partition.state.isr and partition.caught_up(replica_id):
            self._expand_isr(partition, replica_id)

    def _expand_isr(self, partition: Partition, replica_id: int) -> None:
        """A follower outside the ISR has caught up: propose adding it (once at a time per follower).

        Only a follower whose broker is registered (alive in this broker's view of the cluster) is
        eligible, as Kafka's leader checks (KIP-841): one cut off from the metadata store may still
        fetch, but the controller would drop it from the ISR again at once, round after round.
        When it registers again, its next fetch proposes it."""
        key = (partition.topic, partition.index, replica_id)
        if self.isr_writer is None or key in self._expanding:
            return
        if self.broker_info(replica_id) is None:
            return
        refused = self._refused_in.get(key)
        if refused is not None and refused[0] == partition.state.partition_epoch and time.monotonic() < refused[1]:
            return
        self._expanding.add(key)
        writer = self.isr_writer

        async def expand() -> None:
            try:
                state = partition.state
                if (partition.is_leader and replica_id not in state.isr and replica_id in state.replicas
                        and self.broker_info(replica_id) is not None):
                    isr = state.isr + [replica_id]
                    log.info("expanding ISR of %s from %s to %s", partition, state.isr, isr)
                    if await writer(partition.topic, partition.index, replace(state, isr=isr)):
                        self._refused_in.pop(key, None)
                    else:
                        self._refused_in[key] = (state.partition_epoch, time.monotonic() + ISR_RETRY_S)
            except Exception as e:  # the metadata store is away: a later fetch proposes it again
                log.warning("expanding the ISR of %s failed: %s", partition, describe_error(e))
            finally:
                self._expanding.discard(key)
        asyncio.ensure_future(expand())

    async def shrink_isrs(self) -> None:
        """Drop the followers that have not caught up within ``replica.lag.time.max.ms``."""
        if self.isr_writer is None:
            return
        lag = self.config["replica.lag.time.max.ms"]
        now = now_ms()
        for p in list(self.partitions.values()):
            if not p.is_leader:
                continue
            lagging = p.lagging(now, lag)
            if lagging:
                isr = [r for r in p.state.isr if r not in lagging]
                log.info("shrinking ISR of %s from %s to %s (replica.lag.time.max.ms=%d)", p, p.state.isr, isr, lag)
                if await self.isr_writer(p.topic, p.index, replace(p.state, isr=isr)):
                    p.maybe_advance_high_watermark()
