"""Membership of a classic group, whatever its protocol type (Kafka's AbstractCoordinator).

FindCoordinator, then JoinGroup (answering MEMBER_ID_REQUIRED with the id the coordinator
hands out, KIP-394), the leader computes the assignment, SyncGroup hands it out, and
heartbeats keep the member in the group. What the member offers in JoinGroup, how the
leader assigns and what a member does with its assignment belong to the protocol type,
given by a subclass: the consumer's :class:`~samsa.client.consumer_internals.group.GroupMember`
(``consumer``) and Connect's worker member (``connect``).

The coordinator gets a connection of its own: a JoinGroup may wait a whole rebalance,
and a broker answers a connection's requests in order.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError
from samsa.client.metadata import ClusterMetadata
from samsa.protocol import api, errors
from samsa.protocol.api_keys import ApiKey
from samsa.timeouts import within

log = logging.getLogger(__name__)

UNJOINED, JOINING, STABLE = "unjoined", "joining", "stable"
NETWORK_ERRORS = (KafkaConnectionError, KafkaTimeoutError, OSError)
COORDINATOR_MOVED = {errors.E_COORDINATOR_NOT_AVAILABLE, errors.E_NOT_COORDINATOR, errors.E_REQUEST_TIMED_OUT}
RETRY_LATER = {errors.E_COORDINATOR_LOAD_IN_PROGRESS, errors.E_UNKNOWN_TOPIC_OR_PARTITION,
               errors.E_UNSTABLE_OFFSET_COMMIT}
# What a ConsumerGroupHeartbeat or ShareGroupHeartbeat answer means: join again with epoch 0, or try later.
HEARTBEAT_REJOIN = {errors.E_FENCED_MEMBER_EPOCH, errors.E_UNKNOWN_MEMBER_ID}
HEARTBEAT_LATER = {errors.E_COORDINATOR_LOAD_IN_PROGRESS, errors.E_REQUEST_TIMED_OUT}
# The last version before each group API went flexible (the fallback of _request).
_NON_FLEXIBLE = {ApiKey.JOIN_GROUP: 5, ApiKey.SYNC_GROUP: 3, ApiKey.HEARTBEAT: 3, ApiKey.LEAVE_GROUP: 2,
                 ApiKey.OFFSET_COMMIT: 7, ApiKey.OFFSET_FETCH: 5}


class GroupMembership:
    """Join, sync, heartbeat and leave; the protocol type's hooks say what is offered and done."""

    protocol_type = ""

    def __init__(self, cluster: ClusterMetadata, group_id: str, *, instance_id: str | None = None,
                 session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int,
                 request_timeout_ms: int, retry_backoff_ms: int):
        self.cluster = cluster
        self.group_id = group_id
        self.instance_id = instance_id
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff = retry_backoff_ms / 1000
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
        self.listener_error: BaseException | None = None
        self._coordinator_lock = asyncio.Lock()
        self._version_caps: dict[int, int] = {}
        self._join_task: asyncio.Task | None = None
        self._heartbeat_task: asyncio.Task | None = None
        self._last_heartbeat_ok = 0.0

    # ---------------------------------------------------------------- the protocol type's hooks

    def active(self) -> bool:
        """Whether the member wants to be in the group at all (a consumer: once subscribed)."""
        return True

    def holds_assignment(self) -> bool:
        """Whether something assigned is held (it is *lost* if the member is dropped from the group)."""
        return False

    def wake(self) -> None:
        """Something changed that the thread driving the member should look at."""

    def poll_expired(self) -> bool:
        return False

    async def on_poll_expired(self) -> None:
        pass

    def record_rebalance(self) -> None:
        pass

    def join_protocols(self) -> list[dict[str, Any]]:
        """JoinGroup's protocols: ``[{"name": ..., "metadata": bytes}]``, preferred first."""
        raise NotImplementedError

    async def on_join_prepare(self) -> None:
        """Before (re)joining: an eager protocol gives everything up here."""

    async def on_lost(self) -> None:
        """The member was dropped from the group: what it held is gone (``self.lost`` is cleared)."""

    async def perform_assignment(self, protocol_name: str, members: list[dict[str, Any]]) -> dict[str, bytes]:
        """The leader's assignment: member id → assignment bytes, from JoinGroup's members."""
        raise NotImplementedError

    async def on_join_complete(self, protocol_name: str, assignment: bytes) -> None:
        """The member's assignment of the new generation."""
        raise NotImplementedError

    # ---------------------------------------------------------------- coordinator

    async def coordinator_conn(self) -> BrokerConnection:
        async with self._coordinator_lock:
            backoff = self.retry_backoff
            while self.coordinator is None or not self.coordinator.connected:
                try:
                    self.coordinator = await self._find_coordinator()
                except NETWORK_ERRORS as e:
                    log.debug("FindCoordinator for group %s failed: %s", self.group_id, e)
                except errors.KafkaError as e:
                    if e.code not in COORDINATOR_MOVED and e.code not in RETRY_LATER and not e.retriable:
                        raise
                    log.debug("FindCoordinator for group %s: %s", self.group_id, e)
                else:
                    break
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
            return self.coordinator

    async def _find_coordinator(self) -> BrokerConnection:
        cluster = self.cluster
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

    async def request(self, api_key: int, body: dict, *, timeout_ms: int | None = None,
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
            except NETWORK_ERRORS as e:
                self.coordinator_dead(str(e))
                raise
        raise AssertionError("unreachable")

    # ---------------------------------------------------------------- membership

    @property
    def dynamic(self) -> bool:
        return self.instance_id is None

    def needs_join(self) -> bool:
        return self.active() and (self.rejoin_needed or self.state != STABLE or self.generation < 0)

    def request_rejoin(self, reason: str) -> None:
        if not self.rejoin_needed:
            log.info("Request joining group %s due to: %s", self.group_id, reason)
        self.rejoin_needed = True
        self.wake()

    def reset_generation(self, *, member_id: bool = False) -> None:
        """Dropped by the group: what is held is lost."""
        self.generation = -1
        self.state = UNJOINED
        self.rejoin_needed = True
        if member_id:
            self.member_id = ""
        if self.holds_assignment():
            self.lost = True
        self.wake()

    async def ensure_active(self, timeout: float) -> bool:
        """Join (or rejoin) the group, waiting at most ``timeout`` seconds; True once stable."""
        if self.fatal is not None:
            raise self.fatal
        if not self.needs_join():
            return True
        task = self._join_task
        if task is None or task.done():
            task = self._join_task = asyncio.get_running_loop().create_task(self._rejoin())
            task.add_done_callback(lambda _t: self.wake())
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
        if self.lost:
            await self._give_up_lost()
        else:
            await self.on_join_prepare()
        backoff = self.retry_backoff
        while True:
            if self.lost:
                await self._give_up_lost()
            try:
                protocol, assignment = await self._join_and_sync()
                break
            except NETWORK_ERRORS as e:
                log.debug("Rebalance of group %s interrupted: %s", self.group_id, e)
            except _Retry as e:
                log.debug("Rejoining group %s: %s", self.group_id, e)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
        await self.on_join_complete(protocol, assignment)
        if self._heartbeat_task is None or self._heartbeat_task.done():
            self._heartbeat_task = asyncio.get_running_loop().create_task(self._heartbeat_loop())

    async def _give_up_lost(self) -> None:
        self.lost = False
        await self.on_lost()

    async def _join_and_sync(self) -> tuple[str, bytes]:
        rebalance_wait = self.rebalance_timeout_ms + 5000
        while True:
            self.state = JOINING
            body = {"group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                    "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                    "group_instance_id": self.instance_id, "protocol_type": self.protocol_type,
                    "protocols": self.join_protocols(), "reason": "rebalance"}
            resp, version = await self.request(ApiKey.JOIN_GROUP, body, timeout_ms=rebalance_wait)
            code = resp["error_code"]
            if code == errors.E_MEMBER_ID_REQUIRED:
                self.member_id = resp["member_id"]  # KIP-394: join again with the id given
                continue
            if code:
                self._join_error(code, "JoinGroup")
            self.member_id = resp["member_id"]
            self.generation = resp["generation_id"]
            self.record_rebalance()
            self.protocol_name = resp["protocol_name"]
            self.leader_id = resp["leader"]
            log.info("Successfully joined group %s with generation %d (member %s, protocol %s)", self.group_id,
                     self.generation, self.member_id, self.protocol_name)
            assignments: dict[str, bytes] = {}
            if self.leader_id == self.member_id and not resp.get("skip_assignment"):
                assignments = await self.perform_assignment(self.protocol_name or "", resp["members"])
            body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                    "group_instance_id": self.instance_id, "protocol_type": self.protocol_type,
                    "protocol_name": self.protocol_name,
                    "assignments": [{"member_id": m, "assignment": a} for m, a in assignments.items()]}
            resp, _ = await self.request(ApiKey.SYNC_GROUP, body, timeout_ms=rebalance_wait)
            code = resp["error_code"]
            if code:
                self._join_error(code, "SyncGroup")
            self.state = STABLE
            self.rejoin_needed = False
            self._last_heartbeat_ok = asyncio.get_running_loop().time()
            return self.protocol_name or "", bytes(resp["assignment"] or b"")

    def _join_error(self, code: int, what: str) -> None:
        """Handle an error answering JoinGroup/SyncGroup: raise _Retry to join again, or the error."""
        name = errors.error_name(code)
        if code == errors.E_UNKNOWN_MEMBER_ID:
            self.reset_generation(member_id=True)
        elif code == errors.E_ILLEGAL_GENERATION:
            self.reset_generation()
        elif code in COORDINATOR_MOVED:
            self.coordinator_dead(name)
        elif code == errors.E_FENCED_INSTANCE_ID:
            self.fatal = errors.error_for(code, f"The group instance id {self.instance_id} of group {self.group_id} "
                                                f"is used by another member: this one is fenced")
            raise self.fatal
        elif code not in (errors.E_REBALANCE_IN_PROGRESS, errors.E_COORDINATOR_LOAD_IN_PROGRESS):
            self.state = UNJOINED
            raise errors.error_for(code, f"{what} of group {self.group_id} failed: {name}")
        raise _Retry(f"{what}: {name}")

    # ---------------------------------------------------------------- heartbeats

    async def _heartbeat_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if self.state != STABLE or self.generation < 0:
                continue
            if self.poll_expired():
                await self.on_poll_expired()
                continue
            body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                    "group_instance_id": self.instance_id}
            generation = self.generation
            try:
                resp, _ = await self.request(ApiKey.HEARTBEAT, body, timeout_ms=self.request_timeout_ms)
            except (*NETWORK_ERRORS, errors.KafkaError) as e:
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
                                                    f"member of group {self.group_id}: this one is fenced")
                self.reset_generation()
            elif code in COORDINATOR_MOVED:
                self.coordinator_dead(errors.error_name(code))
                self._check_session(loop.time())
            else:
                log.warning("Heartbeat of group %s failed: %s", self.group_id, errors.error_name(code))

    def _check_session(self, now: float) -> None:
        if now - self._last_heartbeat_ok > self.session_timeout_ms / 1000:
            log.info("No heartbeat answered for session.timeout.ms (%d ms); rediscovering the coordinator",
                     self.session_timeout_ms)
            self.coordinator_dead("session timed out without a successful heartbeat")

    async def leave(self, reason: str) -> None:
        """LeaveGroup (dynamic members only; a static member's seat waits for it, KIP-345)."""
        if self.dynamic and self.member_id and self.coordinator is not None and self.coordinator.connected:
            log.info("Member %s sending LeaveGroup request to coordinator of group %s due to %s", self.member_id,
                     self.group_id, reason)
            body = {"group_id": self.group_id, "member_id": self.member_id,
                    "members": [{"member_id": self.member_id, "group_instance_id": None, "reason": reason}]}
            try:
                await within(self.request(ApiKey.LEAVE_GROUP, body, timeout_ms=min(self.request_timeout_ms, 5000)),
                             min(self.request_timeout_ms, 5000) / 1000)
            except (*NETWORK_ERRORS, errors.KafkaError, asyncio.TimeoutError) as e:
                log.debug("LeaveGroup of group %s failed: %s", self.group_id, e)
        self.reset_generation(member_id=self.dynamic)

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
