"""Group membership with the consumer group protocol (KIP-848, ``group.protocol=consumer``).

The broker assigns: the member heartbeats (ConsumerGroupHeartbeat) with its subscription
(topic names, or the pattern as a regex the broker resolves) and, after each change, the
partitions it owns; the coordinator answers with the member epoch and, when it changed, the
member's assignment. The member reconciles inside ``poll()``, as the classic member
rebalances there: partitions taken away are committed (with auto-commit) and revoked
(``on_partitions_revoked``), the new ones assigned (``on_partitions_assigned``), and the next
heartbeat, sent at once, tells the coordinator what the member now owns; revocation always
comes before another member gets the partitions. Fenced (FENCED_MEMBER_EPOCH,
UNKNOWN_MEMBER_ID), the member loses its partitions (``on_partitions_lost``) and joins again
with epoch 0. Session timeout and heartbeat interval are the broker's.

Commits carry the member epoch (OffsetCommit v9); everything about the coordinator
connection, commits and committed offsets is the classic member's (:mod:`.group`).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid

from samsa.client.consumer_internals.assignors import COOPERATIVE
from samsa.client.consumer_internals.group import _COORDINATOR_MOVED, _NETWORK, ConsumerSide, GroupMember
from samsa.client.consumer_internals.membership import HEARTBEAT_LATER, HEARTBEAT_REJOIN
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.timeouts import within

log = logging.getLogger(__name__)

LEAVE_EPOCH, LEAVE_STATIC_EPOCH = -1, -2


def new_member_id() -> str:
    """A member id as Kafka's clients make them (KIP-1082): a random UUID in Kafka's base64 form."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


class ConsumerProtocolMember(GroupMember):
    commit_max_version = None  # OffsetCommit v9+: the member epoch is checked

    def __init__(self, core: ConsumerSide):
        super().__init__(core)
        self.protocol = COOPERATIVE  # partitions kept through a reconciliation are read on
        self.member_id = new_member_id()
        self.member_epoch = 0
        self.remote_assignor: str | None = core.config["group.remote.assignor"] or None
        self.heartbeat_interval = 0.0           # the broker says (group.consumer.heartbeat.interval.ms)
        self.pending: list[dict] | None = None  # an assignment from the coordinator, not reconciled yet
        self._ack_needed = False                # the next heartbeat says which partitions are owned
        self._sent_subscription: tuple | None = None
        self._assigned_once = False
        self._changed = asyncio.Event()         # for _rejoin: an assignment, an error
        self._send_now = asyncio.Event()        # for the heartbeat loop: do not wait the interval

    # ---------------------------------------------------------------- the poll side

    def needs_join(self) -> bool:
        return self.core.subs.subscribed and (self.generation < 0 or self.pending is not None or self.lost
                                              or self.fatal is not None)

    def request_rejoin(self, reason: str) -> None:
        """The subscription changed: tell the coordinator now (it assigns; nothing to rejoin)."""
        log.debug("Heartbeat of group %s expedited: %s", self.group_id, reason)
        self._send_now.set()

    async def _rejoin(self) -> None:
        self._ensure_heartbeat()
        while True:
            if self.fatal is not None:
                raise self.fatal
            if self.lost:
                await self._give_up_lost()
            if self.pending is not None:
                await self._reconcile()
                return
            if self.generation >= 0:
                return
            self._changed.clear()
            await self._changed.wait()

    def _ensure_heartbeat(self) -> None:
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _topic_names(self, ids: set[bytes]) -> dict[bytes, str]:
        def known() -> dict[bytes, str]:
            return {m.topic_id: name for name, m in self.core.cluster.topics.items() if m.topic_id in ids}
        names = known()
        if len(names) < len(ids):
            try:
                await self.core.cluster.refresh(None)
            except (*_NETWORK, errors.KafkaError) as e:
                log.debug("Metadata refresh failed: %s", e)
            names = known()
        return names

    async def _reconcile(self) -> None:
        wire, self.pending = self.pending or [], None
        names = await self._topic_names({tp["topic_id"] for tp in wire})
        target = {TopicPartition(names[tp["topic_id"]], p) for tp in wire if tp["topic_id"] in names
                  for p in tp["partitions"]}
        subs = self.core.subs
        owned = set(subs.assignment)
        revoked, added = sorted(owned - target), sorted(target - owned)
        if revoked:
            await self.core.revoke(revoked)
        subs.assign_from_group(sorted(target))
        self.core.subs.group_topics = {tp.topic for tp in target}
        log.info("Assigned partitions (added %s, revoked %s) of group %s at member epoch %d",
                 [str(tp) for tp in added], [str(tp) for tp in revoked], self.group_id, self.member_epoch)
        if added or not self._assigned_once:
            self._assigned_once = True
            await self.core.invoke_listener("on_partitions_assigned", added)
        self.generation = self.member_epoch
        self.state = "stable"
        self._ack_needed = True
        self._send_now.set()
        self.core.fetcher.kick()

    # ---------------------------------------------------------------- heartbeats

    def _body(self) -> dict:
        subs = self.core.subs
        joining = self.member_epoch == 0
        regex = subs.pattern.pattern if subs.pattern is not None else None
        names = None if regex is not None else sorted(subs.topics)
        subscription = (tuple(names) if names is not None else None, regex)
        send_sub = joining or subscription != self._sent_subscription
        owned = None
        if joining:
            owned = []
        elif self._ack_needed:
            ids = {name: m.topic_id for name, m in self.core.cluster.topics.items()}
            by_id: dict[bytes, list[int]] = {}
            for tp in subs.assignment:
                if tp.topic in ids:
                    by_id.setdefault(ids[tp.topic], []).append(tp.partition)
            owned = [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(by_id.items())]
        return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self.member_epoch,
                "instance_id": self.instance_id, "rack_id": self.rack if joining else None,
                "rebalance_timeout_ms": self.rebalance_timeout_ms if joining else -1,
                "subscribed_topic_names": names if send_sub and names is not None else None,
                "subscribed_topic_regex": regex if send_sub else None,
                "server_assignor": self.remote_assignor if joining else None, "topic_partitions": owned}

    async def _heartbeat_loop(self) -> None:
        backoff = self.retry_backoff
        while self.core.subs.subscribed and self.fatal is None:
            if self.core.poll_expired():
                if self.member_epoch > 0:
                    await self.on_poll_expired()  # leaves; joins again once poll() is called
                await asyncio.sleep(self.retry_backoff)
                continue
            body = self._body()
            acking = body["topic_partitions"] is not None
            try:
                resp, _ = await self.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body,
                                              timeout_ms=self.request_timeout_ms)
            except (*_NETWORK, errors.KafkaError) as e:
                log.debug("Heartbeat of group %s failed: %s", self.group_id, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            code = resp["error_code"]
            if code == 0:
                backoff = self.retry_backoff
                self._handle_ok(resp, body, acking)
            elif code in HEARTBEAT_REJOIN:
                log.info("Heartbeat of group %s: %s; the member loses its partitions and joins again",
                         self.group_id, errors.error_name(code))
                self._fenced()
                continue
            elif code in _COORDINATOR_MOVED or code in HEARTBEAT_LATER:
                if code in _COORDINATOR_MOVED:
                    self.coordinator_dead(errors.error_name(code))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            else:
                self.fatal = errors.error_for(code, resp.get("error_message") or
                                              f"ConsumerGroupHeartbeat of group {self.group_id} failed")
                log.error("Heartbeat of group %s failed: %s", self.group_id, self.fatal)
                self._changed.set()
                self.core.wake_poll()
                return
            self._send_now.clear()
            wait = 0.0 if self._ack_needed or self.member_epoch == 0 else self.heartbeat_interval
            try:
                await within(self._send_now.wait(), wait)
            except asyncio.TimeoutError:
                pass

    def _handle_ok(self, resp: dict, body: dict, acked: bool) -> None:
        self.member_id = resp["member_id"] or self.member_id
        self.heartbeat_interval = resp["heartbeat_interval_ms"] / 1000
        self._sent_subscription = ((tuple(body["subscribed_topic_names"]) if body["subscribed_topic_names"] is not None
                                    else None), body["subscribed_topic_regex"]) \
            if body["subscribed_topic_names"] is not None or body["subscribed_topic_regex"] is not None \
            else self._sent_subscription
        if acked and self.pending is None:
            self._ack_needed = False
        epoch = resp["member_epoch"]
        self.member_epoch = epoch
        if resp["assignment"] is not None:
            self.pending = resp["assignment"]["topic_partitions"]
            self._changed.set()
            self.core.wake_poll()
        elif self.generation >= 0 and self.pending is None:
            self.generation = epoch

    def _fenced(self) -> None:
        self.member_epoch = 0
        self.generation = -1
        self.pending = None
        self._sent_subscription = None
        if self.core.subs.assignment:
            self.lost = True
        self._changed.set()
        self.core.wake_poll()

    # ---------------------------------------------------------------- leaving

    async def leave(self, reason: str) -> None:
        """A heartbeat with epoch -1 (-2 for a static member, who keeps its place until its
        session expires)."""
        if self.member_epoch > 0 and self.coordinator is not None and self.coordinator.connected:
            epoch = LEAVE_EPOCH if self.dynamic else LEAVE_STATIC_EPOCH
            log.info("Member %s leaving group %s (epoch %d) due to %s", self.member_id, self.group_id, epoch, reason)
            body = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": epoch,
                    "instance_id": self.instance_id, "rack_id": None, "rebalance_timeout_ms": -1,
                    "subscribed_topic_names": None, "subscribed_topic_regex": None, "server_assignor": None,
                    "topic_partitions": None}
            timeout_ms = min(self.request_timeout_ms, 5000)
            try:
                await within(self.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, body, timeout_ms=timeout_ms),
                             timeout_ms / 1000)
            except (*_NETWORK, errors.KafkaError, asyncio.TimeoutError) as e:
                log.debug("Leaving group %s failed: %s", self.group_id, e)
        self.member_epoch = 0
        self.generation = -1
        self.pending = None
        self._ack_needed = False
        self._sent_subscription = None
        if self.core.subs.assignment:
            self.lost = True
