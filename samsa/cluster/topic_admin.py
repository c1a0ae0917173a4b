"""Topic administration: creating, growing, configuring and deleting topics, and where their
replicas go. What CreateTopics, CreatePartitions, DeleteTopics and the Alter*Configs
requests (and auto-creation) do, with Kafka's validation and error messages.

A change is written to the metadata store first, then applied to this broker's replicas;
the other brokers of a cluster apply it when their store watches fire.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from collections import Counter
from dataclasses import replace
from typing import Awaitable, Callable

from samsa.broker_config import BROKER_KEYS, BrokerConfig, ConfigError, parse_topic_config, parse_value
from samsa.cluster.metadata import BrokerInfo, MetadataStore, PartitionState, TopicExistsError, TopicInfo, new_topic_id
from samsa.cluster.metadata_cache import MetadataCache
from samsa.cluster.replica_manager import ReplicaManager
from samsa.protocol import errors
from samsa.protocol.names import validate_topic_name
from samsa.storage.descriptors import descriptors_free
from samsa.timeouts import within

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
# Kafka's controller bounds the records one user operation may write (QuorumController's
# MAX_RECORDS_PER_USER_OP): a CreateTopics or CreatePartitions request adding more partitions
# than this in all is refused whole with POLICY_VIOLATION, before any partition is laid out.
MAX_PARTITIONS_PER_REQUEST = 10000


class TopicAdmin:
    def __init__(self, config: BrokerConfig, store: MetadataStore, cache: MetadataCache, replicas: ReplicaManager,
                 alive_brokers: Callable[[], list[BrokerInfo]]):
        self.config = config
        self.store = store
        self.cache = cache
        self.replicas = replicas
        self.alive_brokers = alive_brokers
        self._next_pid = 0
        self._pid_block_end = 0
        self._applying: dict[str, asyncio.Future] = {}  # topic -> its last change, while being applied

    # ---------------------------------------------------------------- request budgets

    def check_new_partitions(self, topics: list[tuple[int, int]]) -> None:
        """CreateTopics: (num_partitions, number of manual assignments) per topic; refuse the
        request when it would add more than MAX_PARTITIONS_PER_REQUEST partitions, as Kafka's
        controller does (counting -1 as ``num.partitions``, and non-positive counts as none)."""
        total = 0
        for num_partitions, assigned in topics:
            if assigned:
                total += assigned
            elif num_partitions == -1:
                total += self.config["num.partitions"]
            elif num_partitions > 0:
                total += num_partitions
        if total > MAX_PARTITIONS_PER_REQUEST:
            raise errors.PolicyViolationError("Excessively large number of partitions per request.")

    def check_added_partitions(self, counts: list[tuple[str, int]]) -> None:
        """CreatePartitions: (topic, new count) per topic; the same bound on the partitions added."""
        total = 0
        for name, count in counts:
            topic = self.cache.topics.get(name)
            if topic is not None and count > len(topic.partitions):
                total += count - len(topic.partitions)
        if total > MAX_PARTITIONS_PER_REQUEST:
            raise errors.PolicyViolationError("Excessively large number of additional partitions per request.")

    # ---------------------------------------------------------------- topics

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: dict[int, list[int]] | None = None,
                     configs: dict[str, str] | None = None, validate_only: bool = False) -> TopicInfo:
        """Create a small topic at once, on the event loop (auto-creation, internal topics)."""
        topic = self._new_topic(name, num_partitions, replication_factor, assignments, configs)
        if not validate_only:
            self._store_new_topic(topic)
            self.replicas.apply_topic(topic)
            self._log_created(topic)
        return topic

    async def create_topic_requested(self, name: str, num_partitions: int, replication_factor: int,
                                     assignments: dict[int, list[int]] | None = None,
                                     configs: dict[str, str] | None = None, validate_only: bool = False,
                                     timeout_ms: int = -1) -> TopicInfo:
        """CreateTopics: as :meth:`create_topic`, the partitions' files made off the event loop,
        so a topic of thousands of partitions does not stall every other client. Not done
        within ``timeout_ms`` (when positive): REQUEST_TIMED_OUT, the topic finishing in the
        background (stored already, it appears once its partitions are applied)."""
        topic = self._new_topic(name, num_partitions, replication_factor, assignments, configs)
        if not validate_only:
            async def store_and_apply() -> None:
                # On a worker thread: the store's fsync waits for the disk, seconds when it is busy.
                await asyncio.get_running_loop().run_in_executor(None, self._store_new_topic, topic)
                await self.replicas.apply_topic_off_loop(topic)
            await self._applied(name, store_and_apply(), timeout_ms, lambda: self._log_created(topic),
                                f"creating topic {name}")
        return topic

    async def _settled(self, name: str, timeout_ms: int) -> int:
        """Wait until the last change to topic ``name`` still being applied here (a creation or
        growth past its request's timeout) is done, so the next one starts from it; what is
        left of ``timeout_ms``. REQUEST_TIMED_OUT if it is not done in time."""
        pending = self._applying.get(name)
        if pending is None or pending.done():
            return timeout_ms
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await within(asyncio.shield(pending), timeout_ms / 1000 if timeout_ms > 0 else None)
        except TimeoutError:
            raise errors.RequestTimedOutError(f"topic {name} is still being changed") from None
        except Exception:  # noqa: BLE001 - logged where it happened; the store has the truth
            pass
        return max(1, timeout_ms - int((loop.time() - started) * 1000)) if timeout_ms > 0 else timeout_ms

    async def _applied(self, name: str, work: Awaitable[None], timeout_ms: int, then: Callable[[], None],
                       what: str) -> None:
        """Wait for a stored change to topic ``name`` to be applied here, up to ``timeout_ms``
        (none when not positive). The work (storing the change, then applying it) goes on
        whatever happens to the request (a client that leaves, a timeout): a change stored must
        not stay half applied. A Kafka error of the work is the request's answer."""
        task = asyncio.ensure_future(work)
        self._applying[name] = task

        def finished(t: asyncio.Future) -> None:
            if self._applying.get(name) is t:
                del self._applying[name]
            if t.cancelled():
                return
            if isinstance(t.exception(), errors.KafkaError):  # the request's answer, nothing broke
                log.info("%s: %s", what, t.exception())
                return
            if t.exception() is not None:
                log.error("%s failed", what, exc_info=t.exception())
                return
            then()
        task.add_done_callback(finished)
        try:
            await within(asyncio.shield(task), timeout_ms / 1000 if timeout_ms > 0 else None)
        except TimeoutError:
            log.info("%s: not done within the request's timeout (%d ms); it goes on", what, timeout_ms)
            raise errors.RequestTimedOutError(
                f"{what} did not finish within {timeout_ms} ms; it goes on in the background") from None

    def _new_topic(self, name: str, num_partitions: int, replication_factor: int,
                   assignments: dict[int, list[int]] | None, configs: dict[str, str] | None) -> TopicInfo:
        """The topic to create, validated as Kafka validates it; nothing written yet."""
        validate_topic_name(name, controller=True)
        if name in self.cache.topics:
            raise errors.TopicAlreadyExistsError(f"Topic '{name}' already exists.")
        configs = dict(configs or {})
        validate_topic_configs(configs)
        if assignments:
            if replication_factor != -1:
                raise errors.InvalidRequestError(
                    "A manual partition assignment was specified, but replication factor was not set to -1.")
            if num_partitions != -1:
                raise errors.InvalidRequestError(
                    "A manual partition assignment was specified, but numPartitions was not set to -1.")
            replicas = self._check_assignments(assignments, start=0)
        else:
            if num_partitions == -1:
                num_partitions = self.config["num.partitions"]
            if replication_factor == -1:
                replication_factor = self.config["default.replication.factor"]
            if num_partitions <= 0:
                raise errors.InvalidPartitionsError("Number of partitions was set to an invalid non-positive value.")
            if num_partitions > MAX_PARTITIONS_PER_REQUEST:
                raise errors.PolicyViolationError("Excessively large number of partitions per request.")
            if replication_factor <= 0:
                raise errors.InvalidReplicationFactorError("Replication factor must be larger than 0, or -1 to use the default value.")
            alive = self.alive_brokers()
            if replication_factor > len(alive):
                raise errors.InvalidReplicationFactorError(
                    f"Unable to replicate the partition {replication_factor} time(s): "
                    f"The target replication factor of {replication_factor} cannot be reached because "
                    f"only {len(alive)} broker(s) are registered or some brokers have all their log "
                    "directories cordoned.")
            replicas = self.assign_replicas(num_partitions, replication_factor, start=0)
        topic = TopicInfo(name, new_topic_id(),
                          {p: PartitionState(replicas=r, leader=r[0], isr=list(r)) for p, r in replicas.items()},
                          configs)
        check_descriptors(replicas)
        return topic

    def _store_new_topic(self, topic: TopicInfo) -> None:
        try:
            self.store.create_topic(topic)
        except TopicExistsError:
            raise errors.TopicAlreadyExistsError(f"Topic '{topic.name}' already exists.") from None

    @staticmethod
    def _log_created(topic: TopicInfo) -> None:
        log.info("created topic %s with %d partitions, replication factor %d", topic.name,
                 len(topic.partitions), topic.replication_factor)

    def auto_create_topic(self, name: str) -> TopicInfo | None:
        if not self.config["auto.create.topics.enable"]:
            return None
        try:
            return self.create_topic(name, -1, -1)
        except errors.TopicAlreadyExistsError:  # created meanwhile (maybe still being applied)
            return self.cache.topics.get(name)

    async def delete_topic(self, name: str, timeout_ms: int = -1) -> None:
        """DeleteTopics: the topic leaves the metadata at once, its partitions are dropped in
        slices of the event loop (REQUEST_TIMED_OUT as :meth:`create_topic_requested`)."""
        if not self.config["delete.topic.enable"]:
            raise errors.TopicDeletionDisabledError("Topic deletion is disabled.")
        timeout_ms = await self._settled(name, timeout_ms)
        if name not in self.cache.topics:
            raise errors.UnknownTopicOrPartitionError("This server does not host this topic-partition.")

        async def store_and_apply() -> None:
            await asyncio.get_running_loop().run_in_executor(None, self.store.delete_topic, name)
            if name not in self.cache.topics:  # deleted meanwhile by another request
                raise errors.UnknownTopicOrPartitionError("This server does not host this topic-partition.")
            await self.replicas.remove_topic_off_loop(name)
        await self._applied(name, store_and_apply(), timeout_ms, lambda: None, f"deleting topic {name}")

    async def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None,
                                validate_only: bool, timeout_ms: int = -1) -> None:
        """CreatePartitions; the new partitions' files are made off the event loop, REQUEST_TIMED_OUT
        as :meth:`create_topic_requested`."""
        timeout_ms = await self._settled(name, timeout_ms)
        topic = self.cache.topics.get(name)
        if topic is None:
            raise errors.UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        current = len(topic.partitions)
        if count < current:
            raise errors.InvalidPartitionsError(
                f"The topic {name} currently has {current} partition(s); {count} would not be an increase.")
        if count == current:
            raise errors.InvalidPartitionsError(f"Topic already has {current} partition(s).")
        added = count - current
        if added > MAX_PARTITIONS_PER_REQUEST:
            raise errors.PolicyViolationError("Excessively large number of additional partitions per request.")
        if assignments:
            if len(assignments) != added:
                raise errors.InvalidReplicaAssignmentError(
                    f"Attempted to add {added} additional partition(s), but only {len(assignments)} assignment(s) were "
                    "specified.")
            replicas = self._check_assignments({current + i: r for i, r in enumerate(assignments)}, start=current)
        else:
            replicas = self.assign_replicas(added, topic.replication_factor, start=current)
        check_descriptors(replicas)
        if validate_only:
            return
        # A new TopicInfo: the cache's is replaced only once the store has the change (a store
        # that cannot write leaves everything as it was)
        grown = replace(topic, partitions={**topic.partitions, **{
            p: PartitionState(replicas=r, leader=r[0], isr=list(r)) for p, r in replicas.items()}})
        self.store.put_assignment(grown)
        await self._applied(name, self.replicas.apply_topic_off_loop(grown), timeout_ms,
                            lambda: log.info("topic %s now has %d partitions", name, count),
                            f"adding partitions to {name}")

    # ---------------------------------------------------------------- replica assignment

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
        for r in assignments.values():  # worded as Kafka 4's controller words them
            if not r:
                raise errors.InvalidReplicaAssignmentError("The manual partition assignment includes an empty replica list.")
            twice = next((b for b in sorted(r) if r.count(b) > 1), None)
            if twice is not None:
                raise errors.InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes the broker {twice} more than once.")
            unknown = next((b for b in r if b not in alive), None)
            if unknown is not None:
                raise errors.InvalidReplicaAssignmentError(
                    f"The manual partition assignment includes broker {unknown}, but no such broker is registered.")
        if len({len(r) for r in assignments.values()}) != 1:
            raise errors.InvalidReplicaAssignmentError("All partitions should have the same number of replicas")
        if sorted(assignments) != list(range(start, start + len(assignments))):
            raise errors.InvalidReplicaAssignmentError("partitions should be a consecutive 0-based integer sequence")
        return assignments

    # ---------------------------------------------------------------- configs

    def alter_topic_configs(self, name: str, configs: dict[str, str], validate_only: bool) -> None:
        """Replace the topic's overrides with ``configs`` (AlterConfigs semantics)."""
        topic = self.cache.topics.get(name)
        if topic is None:
            raise errors.UnknownTopicOrPartitionError(f"The topic '{name}' does not exist.")
        validate_topic_configs(configs)
        if validate_only:
            return
        self.store.put_topic_configs(name, dict(configs))
        topic.configs = dict(configs)
        self.replicas.update_log_configs([name])

    def alter_broker_configs(self, broker_id: int | None, configs: dict[str, str], validate_only: bool) -> None:
        # Kafka answers INVALID_REQUEST for a broker key it refuses, naming every static key asked.
        static = [key for key in configs if key in BROKER_KEYS and not BROKER_KEYS[key].dynamic]
        if static:
            raise errors.InvalidRequestError(f"Cannot update these configs dynamically: [{', '.join(static)}]")
        for key, raw in configs.items():
            spec = BROKER_KEYS.get(key)
            if spec is None:
                raise errors.InvalidConfigError(f"Unknown config name: {key}")
            try:
                parse_value(spec, raw)
            except ConfigError as e:
                raise errors.InvalidRequestError(str(e)) from None
        if validate_only:
            return
        self.store.put_broker_configs(broker_id, configs)
        self.config.apply_dynamic(self.store.broker_configs(None), self.store.broker_configs(self.config.broker_id))
        self.replicas.update_log_configs()

    # ---------------------------------------------------------------- producer ids

    def allocate_producer_id(self) -> int:
        """The next producer id of this broker's block (a new block from the store when it is used up)."""
        if self._next_pid >= self._pid_block_end:
            self._next_pid = self.store.next_producer_id_block(PRODUCER_ID_BLOCK)
            self._pid_block_end = self._next_pid + PRODUCER_ID_BLOCK
        pid = self._next_pid
        self._next_pid += 1
        return pid


def check_descriptors(replicas: dict[int, list[int]]) -> None:
    """Refuse, before touching a disk, partitions a broker could not keep open: each needs a
    descriptor (assuming every broker has the limit this one has)."""
    per_broker = Counter(b for r in replicas.values() for b in r)
    needed = max(per_broker.values(), default=0)
    free = descriptors_free()
    if needed > free:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        raise errors.InvalidPartitionsError(
            f"{len(replicas)} new partition(s) would need {needed} more open files on a broker, but this "
            f"broker can open only {max(free, 0)} more (open file limit {soft}: raise 'ulimit -n')")


def validate_topic_configs(configs: dict[str, str]) -> None:
    for name, raw in configs.items():
        try:
            parse_topic_config(name, raw)
        except ConfigError as e:
            raise errors.InvalidConfigError(str(e)) from None
