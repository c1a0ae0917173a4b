"""A share consumer's membership of its share group (KIP-932): ShareGroupHeartbeat.

The broker assigns and times everything: the member heartbeats with its subscription (topic
names, sent when joining and when they change) every ``heartbeat_interval_ms`` the coordinator
answers (``group.share.heartbeat.interval.ms`` or the group's ``share.heartbeat.interval.ms``);
an answer with an assignment replaces the member's partitions at once. Nothing is revoked
first: a share partition is read by many members together, and a record acquired by this
member stays this member's to acknowledge until its lock expires, whoever else reads the
partition. Fenced (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID), the member joins again with
epoch 0 under the same member id; leaving is a heartbeat with epoch -1.

The coordinator connection (FindCoordinator, reconnecting when it moves) is the classic
membership's (:class:`~samsa.client.consumer_internals.membership.GroupMembership`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Awaitable, Callable

from samsa.client.consumer_internals.consumer_protocol import new_member_id
from samsa.client.consumer_internals.membership import (COORDINATOR_MOVED, HEARTBEAT_LATER, HEARTBEAT_REJOIN,
                                                        NETWORK_ERRORS, GroupMembership)
from samsa.client.metadata import ClusterMetadata
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey
from samsa.timeouts import within

log = logging.getLogger(__name__)

LEAVE_EPOCH = -1


class ShareMember(GroupMembership):
    """Heartbeats of one share consumer; ``assignment`` is what the coordinator last gave."""

    protocol_type = "share"

    def __init__(self, cluster: ClusterMetadata, group_id: str, *, rack: str | None, request_timeout_ms: int,
                 retry_backoff_ms: int, on_change: Callable[[], None],
                 poll_expired: Callable[[], bool] = lambda: False,
                 before_leaving: Callable[[], Awaitable[None]] | None = None):
        super().__init__(cluster, group_id, session_timeout_ms=45000, rebalance_timeout_ms=-1,
                         heartbeat_interval_ms=5000, request_timeout_ms=request_timeout_ms,
                         retry_backoff_ms=retry_backoff_ms)
        self.member_id = new_member_id()
        self.member_epoch = 0
        self.rack = rack or None
        self.topics: list[str] = []             # the subscription
        self.assignment: set[TopicPartition] = set()
        self.assigned_once = asyncio.Event()    # the first answer with an assignment came
        self.fatal: BaseException | None = None
        self._sent_topics: list[str] | None = None
        self._on_change = on_change              # the assignment changed, or a fatal error
        self._send_now = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._poll_expired = poll_expired      # max.poll.interval.ms passed without a poll()
        self.left_for_poll = False             # left the group for that; joins again at the next poll()
        self._before_leaving = before_leaving    # release what the consumer holds, close its share sessions

    # ---------------------------------------------------------------- subscription

    def subscribe(self, topics: list[str]) -> None:
        self.topics = sorted(set(topics))
        self._send_now.set()

    def ensure_running(self) -> None:
        """Heartbeat while subscribed (started once the client has bootstrapped)."""
        if self.topics and self.fatal is None and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def unsubscribe(self) -> None:
        await self.stop()
        await self.leave("the consumer unsubscribed")
        self.topics = []

    # ---------------------------------------------------------------- heartbeats

    def _body(self) -> dict:
        joining = self.member_epoch == 0
        send_topics = joining or self.topics != self._sent_topics
        return {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": self.member_epoch,
                "rack_id": self.rack if joining else None,
                "subscribed_topic_names": list(self.topics) if send_topics else None}

    async def _heartbeat_loop(self) -> None:
        backoff = self.retry_backoff
        while self.topics and self.fatal is None:
            if self._poll_expired() and self.member_epoch > 0:
                log.warning("Share consumer of group %s: no poll() within max.poll.interval.ms; leaving the group "
                            "(its records are released) until the next poll()", self.group_id)
                if self._before_leaving is not None:
                    await self._before_leaving()
                await self.leave("max.poll.interval.ms was exceeded")
                self.left_for_poll = True
                self._on_change()
                return  # started again by the next poll()
            body = self._body()
            try:
                resp, _ = await self.request(ApiKey.SHARE_GROUP_HEARTBEAT, body, timeout_ms=self.request_timeout_ms)
            except errors.UnsupportedVersionError as e:
                self._fail(errors.UnsupportedVersionError(
                    f"The broker does not serve share groups (ShareGroupHeartbeat): {e}"))
                return
            except (*NETWORK_ERRORS, errors.KafkaError) as e:
                log.debug("Share group heartbeat of %s failed: %s", self.group_id, e)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            code = resp["error_code"]
            if code == 0:
                backoff = self.retry_backoff
                self.member_id = resp["member_id"] or self.member_id
                self.member_epoch = resp["member_epoch"]
                self.heartbeat_interval = resp["heartbeat_interval_ms"] / 1000
                if body["subscribed_topic_names"] is not None:
                    self._sent_topics = body["subscribed_topic_names"]
                if resp["assignment"] is not None:
                    await self._assign(resp["assignment"]["topic_partitions"])
            elif code in HEARTBEAT_REJOIN:
                log.info("Share group heartbeat of %s: %s; joining again", self.group_id, errors.error_name(code))
                self.member_epoch = 0
                self._sent_topics = None
                continue
            elif code in COORDINATOR_MOVED or code in HEARTBEAT_LATER:
                if code in COORDINATOR_MOVED:
                    self.coordinator_dead(errors.error_name(code))
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            else:
                self._fail(errors.error_for(code, resp.get("error_message") or
                                            f"ShareGroupHeartbeat of group {self.group_id} failed: "
                                            f"{errors.error_name(code)}"))
                return
            self._send_now.clear()
            try:
                await within(self._send_now.wait(), self.heartbeat_interval)
            except asyncio.TimeoutError:
                pass

    def _fail(self, error: BaseException) -> None:
        self.fatal = error
        log.error("Share group %s: %s", self.group_id, error)
        self._on_change()

    async def _assign(self, wire: list[dict]) -> None:
        ids = {tp["topic_id"] for tp in wire}
        names = self._names(ids)
        if len(names) < len(ids):
            try:
                await self.cluster.refresh(None)
            except (*NETWORK_ERRORS, errors.KafkaError) as e:
                log.debug("Metadata refresh failed: %s", e)
            names = self._names(ids)
        assignment = {TopicPartition(names[tp["topic_id"]], p) for tp in wire if tp["topic_id"] in names
                      for p in tp["partitions"]}
        if assignment != self.assignment or not self.assigned_once.is_set():
            log.info("Share group %s: member %s assigned %s at epoch %d", self.group_id, self.member_id,
                     sorted(str(tp) for tp in assignment), self.member_epoch)
        self.assignment = assignment
        self.assigned_once.set()
        self._on_change()

    def _names(self, ids: set[bytes]) -> dict[bytes, str]:
        return {m.topic_id: name for name, m in self.cluster.topics.items() if m.topic_id in ids}

    # ---------------------------------------------------------------- leaving

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def leave(self, reason: str) -> None:
        """A heartbeat with epoch -1: the coordinator drops the member at once."""
        if self.member_epoch > 0 and self.coordinator is not None and self.coordinator.connected:
            log.info("Member %s leaving share group %s due to %s", self.member_id, self.group_id, reason)
            body = {"group_id": self.group_id, "member_id": self.member_id, "member_epoch": LEAVE_EPOCH,
                    "rack_id": None, "subscribed_topic_names": None}
            timeout_ms = min(self.request_timeout_ms, 5000)
            try:
                await within(self.request(ApiKey.SHARE_GROUP_HEARTBEAT, body, timeout_ms=timeout_ms),
                             timeout_ms / 1000)
            except (*NETWORK_ERRORS, errors.KafkaError, asyncio.TimeoutError) as e:
                log.debug("Leaving share group %s failed: %s", self.group_id, e)
        self.member_epoch = 0
        self._sent_topics = None
        self.assignment = set()
        self.assigned_once.clear()
