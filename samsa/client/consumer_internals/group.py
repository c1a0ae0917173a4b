"""A consumer's group membership (protocol type ``consumer``, the classic protocol), and offsets.

Joining, syncing and heartbeats are :class:`~samsa.client.consumer_internals.membership.GroupMembership`'s;
here the consumer's part: the subscription offered, the assignors run by the leader, and
the rebalance listener run as Java runs it:

* eager protocol: everything is revoked before joining, the new assignment assigned after
* cooperative protocol (KIP-429): partitions are kept through the rebalance; after it,
  only the ones taken away are revoked, and the member joins again so that they can
  move to their new owner
* partitions are *lost* (``on_partitions_lost``) when the member finds it was dropped
  from the group (session timeout, ``max.poll.interval.ms``, fencing)

A static member (``group.instance.id``, KIP-345) does not leave the group on close, so a
restart within ``session.timeout.ms`` takes back its assignment without a rebalance.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Iterable, Protocol

from samsa.client.connection import KafkaTimeoutError
from samsa.client.consumer_internals.assignors import (COOPERATIVE, EAGER, Assignment, Subscription,
                                                       decode_assignment, decode_subscription, encode_assignment,
                                                       encode_subscription, rebalance_protocol)
from samsa.client.consumer_internals.fetcher import Fetcher
from samsa.client.consumer_internals.membership import (COORDINATOR_MOVED, NETWORK_ERRORS, RETRY_LATER, STABLE,
                                                        GroupMembership)
from samsa.client.consumer_internals.records import OffsetAndMetadata
from samsa.client.consumer_internals.subscription import SubscriptionState
from samsa.client.metadata import ClusterMetadata
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.timeouts import within

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "consumer"
_NETWORK = NETWORK_ERRORS
_COORDINATOR_MOVED = COORDINATOR_MOVED
_RETRY_LATER = RETRY_LATER | {errors.E_STALE_MEMBER_EPOCH}  # a consumer-protocol member's commit while its epoch moves


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


class GroupMember(GroupMembership):
    protocol_type = PROTOCOL_TYPE
    #: OffsetCommit's highest version for this protocol (v9 carries a member epoch, KIP-848)
    commit_max_version: int | None = 8

    def __init__(self, core: ConsumerSide):
        c = core.config
        super().__init__(core.cluster, c["group.id"], instance_id=c["group.instance.id"] or None,
                         session_timeout_ms=c["session.timeout.ms"], rebalance_timeout_ms=c["max.poll.interval.ms"],
                         heartbeat_interval_ms=c["heartbeat.interval.ms"], request_timeout_ms=c["request.timeout.ms"],
                         retry_backoff_ms=c["retry.backoff.ms"])
        self.core = core
        self.rack = c["client.rack"] or None
        self.assignors = core.assignors
        self.protocol = rebalance_protocol(self.assignors)
        self.snapshot: dict[str, int] = {}  # partition counts the last assignment was made with

    # ---------------------------------------------------------------- GroupMembership's hooks

    def active(self) -> bool:
        return self.core.subs.subscribed

    def holds_assignment(self) -> bool:
        return bool(self.core.subs.assignment)

    def wake(self) -> None:
        self.core.wake_poll()

    def poll_expired(self) -> bool:
        return self.core.poll_expired()

    async def on_poll_expired(self) -> None:
        log.warning(
            "consumer poll timeout has expired. This means the time between subsequent calls to poll() was longer "
            "than the configured max.poll.interval.ms (%d ms), which typically implies that the poll loop is "
            "spending too much time processing messages. You can address this either by increasing "
            "max.poll.interval.ms or by reducing the maximum size of batches returned in poll() with "
            "max.poll.records.", self.rebalance_timeout_ms)
        await self.leave("consumer poll timeout has expired.")

    def record_rebalance(self) -> None:
        self.core.fetcher.metrics.rebalance.record()

    async def on_join_prepare(self) -> None:
        subs = self.core.subs
        owned = list(subs.assignment)
        if owned and self.core.auto_commit:
            await self.core.commit_quietly(owned)
        if self.protocol == EAGER:
            subs.assign_from_group([])
            await self.core.invoke_listener("on_partitions_revoked", owned)

    async def on_lost(self) -> None:
        subs = self.core.subs
        owned = list(subs.assignment)
        subs.assign_from_group([])
        if owned:
            log.info("Lost previously assigned partitions %s", ", ".join(map(str, owned)))
            await self.core.invoke_listener("on_partitions_lost", owned)

    def join_protocols(self) -> list[dict[str, Any]]:
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

    async def perform_assignment(self, protocol_name: str, members: list[dict]) -> dict[str, bytes]:
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

    async def on_join_complete(self, protocol_name: str, raw: bytes) -> None:
        assignment = decode_assignment(raw)
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
                await self.core.revoke(revoked)
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
                resp, _ = await within(self.request(ApiKey.OFFSET_COMMIT, body, max_version=self.commit_max_version),
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
                resp, _ = await within(self.request(ApiKey.OFFSET_FETCH, body, max_version=7),
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
