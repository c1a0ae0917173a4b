"""Group membership through the group coordinator (the classic protocol), and offsets.

FindCoordinator, then JoinGroup (answering MEMBER_ID_REQUIRED with the id the
coordinator hands out, KIP-394), the leader runs the assignor, SyncGroup hands out the
assignment, and heartbeats keep the member in the group. The rebalance listener runs
as Java runs it:

* eager protocol: everything is revoked before joining, the new assignment assigned after
* cooperative protocol (KIP-429): partitions are kept through the rebalance; after it,
  only the ones taken away are revoked, and the member joins again so that they can
  move to their new owner
* partitions are *lost* (``on_partitions_lost``) when the member finds it was dropped
  from the group (session timeout, ``max.poll.interval.ms``, fencing)

A static member (``group.instance.id``, KIP-345) does not leave the group on close, so a
restart within ``session.timeout.ms`` takes back its assignment without a rebalance.

The coordinator gets a connection of its own: a JoinGroup may wait a whole rebalance,
and a broker answers a connection's requests in order.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable, Protocol

from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError
from samsa.client.consumer_internals.assignors import (COOPERATIVE, EAGER, Assignment, Subscription,
                                                       decode_assignment, decode_subscription, encode_assignment,
                                                       encode_subscription, rebalance_protocol)
from samsa.client.consumer_internals.fetcher import Fetcher
from samsa.client.consumer_internals.records import OffsetAndMetadata
from samsa.client.consumer_internals.subscription import SubscriptionState
from samsa.client.metadata import ClusterMetadata
from samsa.client.types import TopicPartition
from samsa.protocol import api, errors
from samsa.protocol.api_keys import ApiKey
from samsa.timeouts import within

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"
_NETWORK = (KafkaConnectionError, KafkaTimeoutError, OSError)
_COORDINATOR_MOVED = {errors.E_COORDINATOR_NOT_AVAILABLE, errors.E_NOT_COORDINATOR, errors.E_REQUEST_TIMED_OUT}
# The last version before each group API went flexible (the fallback of _request).
_NON_FLEXIBLE = {ApiKey.JOIN_GROUP: 5, ApiKey.SYNC_GROUP: 3, ApiKey.HEARTBEAT: 3, ApiKey.LEAVE_GROUP: 2,
                 ApiKey.OFFSET_COMMIT: 7, ApiKey.OFFSET_FETCH: 5}
_RETRY_LATER = {errors.E_COORDINATOR_LOAD_IN_PROGRESS, errors.E_UNKNOWN_TOPIC_OR_PARTITION,
                errors.E_UNSTABLE_OFFSET_COMMIT, errors.E_STALE_MEMBER_EPOCH}


class CommitFailedError(Exception):
    """The group moved on without this member (Java's CommitFailedException)."""

    def __init__(self, reason: str = ""):
        super().__init__(
            "Commit cannot be completed since the group has already rebalanced and assigned the partitions to "
            "another member. This means that the time between subsequent calls to poll() was longer than the "
            "configured max.poll.interval.ms, which typically implies that the poll loop is spending too much time "
            "message processing. You can address this either by increasing max.poll.interval.ms or by reducing "
            "the maximum size of batches returned in poll() with max.poll.records." + (f" ({reason})" if reason else ""))


class ConsumerSide(Protocol):
    """What group membership needs of the consumer it serves (AsyncConsumer is one)."""

    config: Any
    cluster: ClusterMetadata
    subs: SubscriptionState
    fetcher: Fetcher
    auto_commit: bool

    def wake_poll(self) -> None: ...
    def poll_expired(self) -> bool: ...
    async def commit_quietly(self, partitions: Iterable[TopicPartition], timeout: float | None = None) -> None: ...
    async def partition_counts(self, topics: list[str]) -> dict[str, int]: ...
    async def invoke_listener(self, method: str, partitions: list[TopicPartition]) -> None: ...


class GroupMember:
    #: OffsetCommit's highest version for this protocol (v9 carries a member epoch, KIP-848)
    commit_max_version: int | None = 8

    def __init__(self, core: ConsumerSide):
        c = core.config
        self.core = core
        self.group_id: str = c["group.id"]
        self.instance_id: str | None = c["group.instance.id"] or None
        self.session_timeout_ms = c["session.timeout.ms"]
        self.rebalance_timeout_ms = c["max.poll.interval.ms"]
        self.heartbeat_interval = c["heartbeat.interval.ms"] / 1000
        self.request_timeout_ms = c["request.timeout.ms"]
        self.retry_backoff = c["retry.backoff.ms"] / 1000
        self.rack = c["client.rack"] or None
        self.assignors = core.assignors
        self.protocol = rebalance_protocol(self.assignors)
        self.member_id = ""
        self.generation = -1
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.state = UNJOINED
        self.rejoin_needed = True
        self.lost = False
        self.fatal: BaseException | None = None
        self.coordinator: BrokerConnection | None = None
        self.coordinator_id: int | None = None
        self.snapshot: dict[str, int] = {}  # partition counts the last assignment was made with
        self.listener_error: BaseException | None = None
        self._coordinator_lock = asyncio.Lock()
        self._version_caps: dict[int, int] = {}
        self._join_task: asyncio.Task | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self._last_heartbeat_ok = 0.0

    # ---------------------------------------------------------------- coordinator

    async def coordinator_conn(self) -> BrokerConnection:
        async with self._coordinator_lock:
            backoff = self.retry_backoff
            while self.coordinator is None or not self.coordinator.connected:
                try:
                    self.coordinator = await self._find_coordinator()
                except _NETWORK as e:
                    log.debug("FindCoordinator for group %s failed: %s", self.group_id, e)
                except errors.KafkaError as e:
                    if e.code not in _COORDINATOR_MOVED and e.code not in _RETRY_LATER and not e.retriable:
                        raise
                    log.debug("FindCoordinator for group %s: %s", self.group_id, e)
                else:
                    break
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            return self.coordinator

    async def _find_coordinator(self) -> BrokerConnection:
        cluster = self.core.cluster
        conn = await cluster.any()
        version = conn.pick_version(ApiKey.FIND_COORDINATOR)
        resp = await conn.request(ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0,
                                                     "coordinator_keys": [self.group_id]}, version=version)
        found = resp["coordinators"][0] if version >= 4 else resp
        if found["error_code"]:
            raise errors.error_for(found["error_code"], found.get("error_message") or "")
        coordinator = BrokerConnection(found["host"], found["port"], cluster.client_id,
                                       request_timeout_ms=self.request_timeout_ms,
                                       connect_timeout_ms=cluster.connect_timeout_ms,
                                       security=cluster.security)
        await coordinator.connect()
        self.coordinator_id = found["node_id"]
        log.info("Discovered group coordinator %s:%d (id: %d) for group %s", found["host"], found["port"],
                 found["node_id"], self.group_id)
        return coordinator

    def coordinator_dead(self, reason: str = "") -> None:
        if self.coordinator is not None:
            log.info("Group coordinator %s is unavailable or invalid%s, will attempt rediscovery",
                     self.coordinator.address, f" due to cause: {reason}" if reason else "")
            self.coordinator.close()
            self.coordinator = None

    async def _request(self, api_key: int, body: dict, *, timeout_ms: int | None = None,
                       max_version: int | None = None) -> tuple[dict, int]:
        """(response, version) from the coordinator; a lost connection marks it unknown.

        A coordinator that drops the connection on (or answers garbage to) a flexible
        version it advertised gets the last non-flexible version from then on: librdkafka's
        mock cluster, for one, advertises JoinGroup v6 and SyncGroup v4 but cannot read them.
        """
        for attempt in range(2):
            conn = await self.coordinator_conn()
            caps = [v for v in (max_version, self._version_caps.get(api_key)) if v is not None]
            version = conn.pick_version(api_key, max_version=min(caps) if caps else None)
            try:
                return await conn.request(api_key, body, version=version, timeout_ms=timeout_ms), version
            except (KafkaConnectionError, errors.CorruptRecordError) as e:
                floor = _NON_FLEXIBLE.get(api_key)
                if isinstance(e, KafkaConnectionError):
                    self.coordinator_dead(str(e))
                if attempt or floor is None or version <= floor or api_key in self._version_caps:
                    raise
                log.info("%s v%d to the coordinator of group %s failed (%s): using v%d from now on",
                         api.api(api_key).name, version, self.group_id, e, floor)
                self._version_caps[api_key] = floor
            except _NETWORK as e:
                self.coordinator_dead(str(e))
                raise
        raise AssertionError("unreachable")

    # ---------------------------------------------------------------- membership

    @property
    def dynamic(self) -> bool:
        return self.instance_id is None

    def needs_join(self) -> bool:
        return self.core.subs.subscribed and (self.rejoin_needed or self.state != STABLE or self.generation < 0)

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("Request joining group %s due to: %s", self.group_id, reason)
        self.rejoin_needed = True
        self.core.wake_poll()

    def reset_generation(self, *, member_id: bool = False) -> None:
        """Dropped by the group: the partitions held are lost."""
        self.generation = -1
        self.state = UNJOINED
        self.rejoin_needed = True
        if member_id:
            self.member_id = ""
        if self.core.subs.assignment:
            self.lost = True
        self.core.wake_poll()

    async def ensure_active(self, timeout: float) -> bool:
        """Join (or rejoin) the group, waiting at most ``timeout`` seconds; True once stable."""
        if self.fatal is not None:
            raise self.fatal
        if not self.needs_join():
            return True
        task = self._join_task
        if task is None or task.done():
            task = self._join_task = asyncio.get_running_loop().create_task(self._rejoin())
            task.add_done_callback(lambda _t: self.core.wake_poll())
        try:
            await within(asyncio.shield(task), max(timeout, 0))
        except asyncio.TimeoutError:
            return False
        finally:
            if task.done():
                self._join_task = None
        error, self.listener_error = self.listener_error, None
        if error is not None:
            raise error
        return not self.needs_join()

    @property
    def joining(self) -> bool:
        return self._join_task is not None and not self._join_task.done()

    async def _rejoin(self) -> None:
        await self._on_join_prepare()
        backoff = self.retry_backoff
        while True:
            if self.lost:
                await self._give_up_lost()
            try:
                assignment = await self._join_and_sync()
                break
            except _NETWORK as e:
                log.debug("Rebalance of group %s interrupted: %s", self.group_id, e)
            except _Retry as e:
                log.debug("Rejoining group %s: %s", self.group_id, e)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        await self._on_join_complete(assignment)

    async def _on_join_prepare(self) -> None:
        subs = self.core.subs
        if self.lost:
            await self._give_up_lost()
            return
        owned = list(subs.assignment)
        if owned and self.core.auto_commit:
            await self.core.commit_quietly(owned)
        if self.protocol == EAGER:
            subs.assign_from_group([])
            await self.core.invoke_listener("on_partitions_revoked", owned)

    async def _give_up_lost(self) -> None:
        subs = self.core.subs
        owned = list(subs.assignment)
        self.lost = False
        subs.assign_from_group([])
        if owned:
            log.info("Lost previously assigned partitions %s", ", ".join(map(str, owned)))
            await self.core.invoke_listener("on_partitions_lost", owned)

    def _protocols(self) -> list[dict[str, Any]]:
        subs = self.core.subs
        owned = list(subs.assignment) if self.protocol == COOPERATIVE else []
        out = []
        for assignor in self.assignors:
            user_data = None
            hook = getattr(assignor, "subscription_user_data", None)
            if callable(hook):
                user_data = hook(set(subs.topics))
            sub = Subscription(sorted(subs.topics), user_data, owned, self.generation, self.rack)
            out.append({"name": assignor.name, "metadata": encode_subscription(sub)})
        return out

    async def _join_and_sync(self) -> Assignment:
        rebalance_wait = self.rebalance_timeout_ms + 5000
        while True:
            self.state = JOINING
            body = {"group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                    "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                    "group_instance_id": self.instance_id, "protocol_type": PROTOCOL_TYPE,
                    "protocols": self._protocols(), "reason": "rebalance"}
            resp, version = await self._request(ApiKey.JOIN_GROUP, body, timeout_ms=rebalance_wait)
            code = resp["error_code"]
            if code == errors.E_MEMBER_ID_REQUIRED:
                self.member_id = resp["member_id"]  # KIP-394: join again with the id given
                continue
            if code:
                self._join_error(code, "JoinGroup")
            self.member_id = resp["member_id"]
            self.generation = resp["generation_id"]
            self.core.fetcher.metrics.rebalance.record()
            self.protocol_name = resp["protocol_name"]
            self.leader_id = resp["leader"]
            log.info("Successfully joined group %s with generation %d (member %s, protocol %s)", self.group_id,
                     self.generation, self.member_id, self.protocol_name)
            assignments: dict[str, bytes] = {}
            if self.leader_id == self.member_id and not resp.get("skip_assignment"):
                assignments = await self._assign(self.protocol_name, resp["members"])
            body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                    "group_instance_id": self.instance_id, "protocol_type": PROTOCOL_TYPE,
                    "protocol_name": self.protocol_name,
                    "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]}
            resp, _ = await self._request(ApiKey.SYNC_GROUP, body, timeout_ms=rebalance_wait)
            code = resp["error_code"]
            if code:
                self._join_error(code, "SyncGroup")
            self.state = STABLE
            self.rejoin_needed = False
            self._last_heartbeat_ok = asyncio.get_running_loop().time()
            return decode_assignment(bytes(resp["assignment"] or b""))

    def _join_error(self, code: int, what: str) -> None:
        """Handle an error answering JoinGroup/SyncGroup: raise _Retry to join again, or the error."""
        name = errors.error_name(code)
        if code == errors.E_UNKNOWN_MEMBER_ID:
            self.reset_generation(member_id=True)
        elif code == errors.E_ILLEGAL_GENERATION:
            self.reset_generation()
        elif code in _COORDINATOR_MOVED:
            self.coordinator_dead(name)
        elif code == errors.E_FENCED_INSTANCE_ID:
            self.fatal = errors.error_for(code, f"The group instance id {self.instance_id} of group {self.group_id} "
                                                f"is used by another consumer: this one is fenced")
            raise self.fatal
        elif code not in (errors.E_REBALANCE_IN_PROGRESS, errors.E_COORDINATOR_LOAD_IN_PROGRESS):
            self.state = UNJOINED
            raise errors.error_for(code, f"{what} of group {self.group_id} failed: {name}")
        raise _Retry(f"{what}: {name}")

    async def _assign(self, protocol_name: str | None, members: list[dict]) -> dict[str, bytes]:
        assignor = next((a for a in self.assignors if a.name == protocol_name), None)
        if assignor is None:
            raise errors.InconsistentGroupProtocolError(f"The group chose assignor {protocol_name}, "
                                                        f"which this consumer does not have")
        subscriptions: dict[str, Subscription] = {}
        for m in members:
            try:
                sub = decode_subscription(bytes(m["metadata"]))
            except errors.KafkaError as e:
                log.warning("Cannot read the subscription of member %s: %s", m["member_id"], e)
                sub = Subscription([])
            sub.group_instance_id = m.get("group_instance_id")
            subscriptions[m["member_id"]] = sub
        topics = sorted({t for s in subscriptions.values() for t in s.topics})
        self.core.subs.group_topics = set(topics)
        counts = await self.core.partition_counts(topics)
        self.snapshot = dict(counts)
        result = assignor.assign(counts, subscriptions)
        log.info("Leader of group %s: assignor %s gave %s", self.group_id, assignor.name,
                 {m: [str(tp) for tp in tps] for m, tps in result.items()})
        hook = getattr(assignor, "assignment_user_data", None)
        return {m: encode_assignment(Assignment(list(result.get(m, [])),
                                                hook(m) if callable(hook) else None))
                for m in subscriptions}

    async def _on_join_complete(self, assignment: Assignment) -> None:
        subs = self.core.subs
        wanted = set(subs.topics)
        assigned = [tp for tp in assignment.partitions if tp.topic in wanted]
        if len(assigned) != len(assignment.partitions):
            self.request_rejoin("the assignment holds topics this consumer does not subscribe to")
        if self.leader_id != self.member_id:
            self.snapshot = await self.core.partition_counts(sorted(wanted))
        if self.protocol == COOPERATIVE:
            owned = set(subs.assignment)
            revoked = sorted(owned - set(assigned))
            added = sorted(set(assigned) - owned)
            if revoked:
                for tp in revoked:
                    subs.assignment[tp].revoking = True  # nothing more is read from them
                if self.core.auto_commit:
                    await self.core.commit_quietly(revoked)
                await self.core.invoke_listener("on_partitions_revoked", revoked)
                subs.assign_from_group([tp for tp in subs.assignment if tp not in revoked])
                self.request_rejoin("partitions were revoked (cooperative rebalance)")
            subs.assign_from_group(assigned)
            log.info("Assigned partitions (added %s, revoked %s) of group %s", added, revoked, self.group_id)
            await self.core.invoke_listener("on_partitions_assigned", added)
        else:
            subs.assign_from_group(assigned)
            log.info("Assigned partitions %s of group %s", [str(tp) for tp in assigned], self.group_id)
            await self.core.invoke_listener("on_partitions_assigned", assigned)
        self.core.fetcher.kick()
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    # ---------------------------------------------------------------- heartbeats

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if self.state != STABLE or self.generation < 0:
                continue
            if self.core.poll_expired():
                await self._poll_timeout()
                continue
            body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                    "group_instance_id": self.instance_id}
            generation = self.generation
            try:
                resp, _ = await self._request(ApiKey.HEARTBEAT, body, timeout_ms=self.request_timeout_ms)
            except (*_NETWORK, errors.KafkaError) as e:
                log.debug("Heartbeat of group %s failed: %s", self.group_id, e)
                self._check_session(loop.time())
                continue
            if generation != self.generation or self.state != STABLE:
                continue  # a rebalance happened meanwhile: this answer is stale
            code = resp["error_code"]
            if code == 0:
                self._last_heartbeat_ok = loop.time()
            elif code == errors.E_REBALANCE_IN_PROGRESS:
                self._last_heartbeat_ok = loop.time()
                self.request_rejoin("the group is rebalancing")
            elif code in (errors.E_ILLEGAL_GENERATION, errors.E_UNKNOWN_MEMBER_ID):
                log.info("Heartbeat of group %s: %s; the member has to join again", self.group_id,
                         errors.error_name(code))
                self.reset_generation(member_id=code == errors.E_UNKNOWN_MEMBER_ID)
            elif code == errors.E_FENCED_INSTANCE_ID:
                self.fatal = errors.error_for(code, f"The group instance id {self.instance_id} is used by another "
                                                    f"consumer of group {self.group_id}: this one is fenced")
                self.reset_generation()
            elif code in _COORDINATOR_MOVED:
                self.coordinator_dead(errors.error_name(code))
                self._check_session(loop.time())
            else:
                log.warning("Heartbeat of group %s failed: %s", self.group_id, errors.error_name(code))

    def _check_session(self, now: float) -> None:
        if now - self._last_heartbeat_ok > self.session_timeout_ms / 1000:
            log.info("No heartbeat answered for session.timeout.ms (%d ms); rediscovering the coordinator",
                     self.session_timeout_ms)
            self.coordinator_dead("session timed out without a successful heartbeat")

    async def _poll_timeout(self) -> None:
        log.warning(
            "consumer poll timeout has expired. This means the time between subsequent calls to poll() was longer "
            "than the configured max.poll.interval.ms (%d ms), which typically implies that the poll loop is "
            "spending too much time processing messages. You can address this either by increasing "
            "max.poll.interval.ms or by reducing the maximum size of batches returned in poll() with "
            "max.poll.records.", self.rebalance_timeout_ms)
        await self.leave("consumer poll timeout has expired.")

    async def leave(self, reason: str) -> None:
        """LeaveGroup (dynamic members only; a static member's seat waits for it, KIP-345)."""
        if self.dynamic and self.member_id and self.coordinator is not None and self.coordinator.connected:
            log.info("Member %s sending LeaveGroup request to coordinator of group %s due to %s", self.member_id,
                     self.group_id, reason)
            body = {"group_id": self.group_id, "member_id": self.member_id,
                    "members": [{"member_id": self.member_id, "group_instance_id": None, "reason": reason}]}
            try:
                await within(self._request(ApiKey.LEAVE_GROUP, body, timeout_ms=min(self.request_timeout_ms, 5000)),
                                       min(self.request_timeout_ms, 5000) / 1000)
            except (*_NETWORK, errors.KafkaError, asyncio.TimeoutError) as e:
                log.debug("LeaveGroup of group %s failed: %s", self.group_id, e)
        self.reset_generation(member_id=self.dynamic)

    # ---------------------------------------------------------------- offsets

    def _commit_identity(self) -> tuple[int, str]:
        if self.core.subs.subscribed and self.generation >= 0:
            return self.generation, self.member_id
        return -1, ""

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata], timeout: float) -> None:
        """OffsetCommit, retrying coordinator moves until ``timeout`` (s)."""
        if not offsets:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + timeout
        backoff = self.retry_backoff
        topics: dict[str, list[dict]] = {}
        for tp, om in sorted(offsets.items()):
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": om.offset,
                "committed_leader_epoch": om.leader_epoch if om.leader_epoch is not None else -1,
                "commit_timestamp": -1, "committed_metadata": om.metadata or ""})
        while True:
            generation, member_id = self._commit_identity()
            body = {"group_id": self.group_id, "generation_id_or_member_epoch": generation, "member_id": member_id,
                    "group_instance_id": self.instance_id if generation >= 0 else None, "retention_time_ms": -1,
                    "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}
            try:
                resp, _ = await within(self._request(ApiKey.OFFSET_COMMIT, body, max_version=self.commit_max_version),
                                                 max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                raise KafkaTimeoutError(f"Timeout of {int(timeout * 1000)}ms expired before successfully "
                                        f"committing offsets {self._describe(offsets)}") from None
            except _NETWORK as e:
                retry_error: BaseException = e
            else:
                codes = {p["error_code"] for t in resp["topics"] for p in t["partitions"]} - {0}
                if not codes:
                    sensors = self.core.fetcher.metrics
                    sensors.commit.record()
                    sensors.commit_latency.record((loop.time() - started) * 1000)
                    return
                code = next(iter(codes))
                name = errors.error_name(code)
                if code in _COORDINATOR_MOVED:
                    self.coordinator_dead(name)
                elif code == errors.E_REBALANCE_IN_PROGRESS:
                    if self.state == STABLE:
                        self.request_rejoin("the group is rebalancing")
                    raise errors.RebalanceInProgressError(
                        "Offset commit cannot be completed since the consumer is undergoing a rebalance for auto "
                        "partition assignment. You can try completing the rebalance by calling poll() and then "
                        "retry the operation.")
                elif code in (errors.E_ILLEGAL_GENERATION, errors.E_UNKNOWN_MEMBER_ID):
                    if generation >= 0 and generation == self.generation and self.state == STABLE:
                        self.reset_generation(member_id=code == errors.E_UNKNOWN_MEMBER_ID)
                    raise CommitFailedError(name)
                elif code == errors.E_FENCED_INSTANCE_ID:
                    self.fatal = errors.error_for(code, f"Group instance {self.instance_id} is fenced")
                    raise self.fatal
                elif code not in _RETRY_LATER:
                    raise errors.error_for(code, f"Offset commit of group {self.group_id} failed: {name}")
                retry_error = errors.error_for(code)
            if loop.time() + backoff >= deadline:
                raise KafkaTimeoutError(f"Timeout of {int(timeout * 1000)}ms expired before successfully "
                                        f"committing offsets {self._describe(offsets)}: {retry_error}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    @staticmethod
    def _describe(offsets: dict[TopicPartition, OffsetAndMetadata]) -> str:
        return "{" + ", ".join(f"{tp}=OffsetAndMetadata{{offset={om.offset}, metadata='{om.metadata}'}}"
                               for tp, om in sorted(offsets.items())) + "}"

    async def fetch_committed(self, tps: list[TopicPartition], timeout: float
                              ) -> dict[TopicPartition, OffsetAndMetadata | None]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        backoff = self.retry_backoff
        topics: dict[str, list[int]] = {}
        for tp in sorted(set(tps)):
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = {"group_id": self.group_id, "require_stable": False,
                "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]}
        while True:
            try:
                resp, _ = await within(self._request(ApiKey.OFFSET_FETCH, body, max_version=7),
                                                 max(deadline - loop.time(), 0.001))
            except asyncio.TimeoutError:
                raise KafkaTimeoutError(f"Timeout of {int(timeout * 1000)}ms expired before the last committed "
                                        f"offsets of partitions {sorted(map(str, tps))} could be determined.") from None
            except _NETWORK as e:
                retry_error: BaseException = e
            else:
                code = resp.get("error_code", 0)
                if not code:
                    codes = {p["error_code"] for t in resp["topics"] for p in t["partitions"]} - {0}
                    code = next(iter(codes), 0)
                if not code:
                    out: dict[TopicPartition, OffsetAndMetadata | None] = {tp: None for tp in tps}
                    for t in resp["topics"]:
                        for p in t["partitions"]:
                            tp = TopicPartition(t["name"], p["partition_index"])
                            if p["committed_offset"] >= 0:
                                epoch = p.get("committed_leader_epoch", -1)
                                out[tp] = OffsetAndMetadata(p["committed_offset"], p.get("metadata") or "",
                                                            epoch if epoch >= 0 else None)
                    return out
                if code in _COORDINATOR_MOVED:
                    self.coordinator_dead(errors.error_name(code))
                elif code not in _RETRY_LATER:
                    raise errors.error_for(code, f"Fetching committed offsets of group {self.group_id} failed: "
                                                 f"{errors.error_name(code)}")
                retry_error = errors.error_for(code)
            if loop.time() + backoff >= deadline:
                raise KafkaTimeoutError(f"Timeout of {int(timeout * 1000)}ms expired before the last committed "
                                        f"offsets could be determined: {retry_error}")
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    # ---------------------------------------------------------------- close

    async def stop_tasks(self) -> None:
        tasks = [t for t in (self._join_task, self._heartbeat_task) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._join_task = self._heartbeat_task = None

    async def close(self) -> None:
        await self.stop_tasks()
        if self.coordinator is not None:
            self.coordinator.close()
            await self.coordinator.wait_closed()
            self.coordinator = None


class _Retry(Exception):
    """JoinGroup/SyncGroup must be sent again."""
