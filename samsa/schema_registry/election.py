"""Electing the registry process that writes, as the Schema Registry does: the processes are
members of a Kafka group (``schema.registry.group.id``, protocol type ``sr``, protocol ``v0``)
on the broker's group coordinator. A member's metadata is its identity as JSON
(``{"version": 1, "host", "port", "scheme", "master_eligibility"}``); the group's leader picks
the current writer if it is still a member, else the first eligible identity (by host, port),
and gives every member the assignment
``{"version": 1, "error": 0, "master": member id, "master_identity": identity}``. A member that
stops heartbeating (killed) is dropped by the coordinator after its session timeout, the
others join again and a new writer is picked.

The member speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup over Samsa's client connections
(``ClusterMetadata``, ``BrokerConnection``) on its own event-loop thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError
from samsa.client.loop import LoopThread
from samsa.client.metadata import ClusterMetadata
from samsa.client.security import security_of
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

PROTOCOL_TYPE, PROTOCOL = "sr", "v0"
_NETWORK = (KafkaConnectionError, KafkaTimeoutError, OSError, asyncio.TimeoutError)


class LeaderElector:
    """``on_leader(identity or None, is_self)`` is called from the elector's thread on each change."""

    def __init__(self, client_config: dict[str, Any], group_id: str, identity: dict,
                 on_leader: Callable[[dict | None, bool], None], session_timeout_ms: int = 10000):
        self.client_config, self.group_id, self.identity = client_config, group_id, identity
        self.on_leader = on_leader
        self.session_ms = session_timeout_ms
        self.heartbeat_s = session_timeout_ms / 3000
        self.member_id, self.generation = "", -1
        self.conn: BrokerConnection | None = None
        self.cluster: ClusterMetadata | None = None
        self.stopped = False
        self.leader: dict | None = None
        self._thread: LoopThread | None = None
        self._task: Any = None
        self._warned = False

    def start(self) -> None:
        self._thread = LoopThread("schema-registry-election")
        self._task = asyncio.run_coroutine_threadsafe(self._run(), self._thread.loop)

    def stop(self) -> None:
        if self._thread is None:
            return
        self.stopped = True
        try:
            asyncio.run_coroutine_threadsafe(self._leave(), self._thread.loop).result(5)
        except Exception:  # noqa: BLE001
            pass
        self._thread.stop()

    def _set_leader(self, identity: dict | None) -> None:
        if identity != self.leader:
            self.leader = identity
            is_self = identity is not None and identity == self.identity
            log.info("Schema registry writer: %s%s", identity and f"{identity['scheme']}://{identity['host']}:"
                     f"{identity['port']}", " (this process)" if is_self else "")
            try:
                self.on_leader(identity, is_self)
            except Exception:  # noqa: BLE001
                log.exception("on_leader failed")

    async def _coordinator(self) -> BrokerConnection:
        while self.conn is None or not self.conn.connected:
            try:
                if self.cluster is None:
                    self.cluster = ClusterMetadata(self.client_config["bootstrap.servers"],
                                                   client_id="schema-registry-election",
                                                   security=security_of(self.client_config))
                conn = await self.cluster.any()
                resp = await conn.request(ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0,
                                                                    "coordinator_keys": [self.group_id]},
                                          version=conn.pick_version(ApiKey.FIND_COORDINATOR))
                found = resp["coordinators"][0] if resp.get("coordinators") else resp
                if found["error_code"]:
                    raise errors.error_for(found["error_code"], "FindCoordinator")
                self.conn = BrokerConnection(found["host"], found["port"], "schema-registry-election",
                                             request_timeout_ms=self.session_ms + 5000,
                                             security=security_of(self.client_config))
                await self.conn.connect()
            except (*_NETWORK, errors.KafkaError) as e:
                log.debug("FindCoordinator for %s: %s", self.group_id, e)
                self.conn = None
                if self.stopped:
                    raise
                await asyncio.sleep(0.3)
        return self.conn

    def _dead(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    async def _call(self, api_key: int, body: dict) -> dict:
        conn = await self._coordinator()
        try:
            return await conn.request(api_key, body, version=conn.pick_version(api_key))
        except _NETWORK:
            self._dead()
            raise

    def _error(self, code: int) -> None:
        if code in (errors.E_UNKNOWN_MEMBER_ID, errors.E_ILLEGAL_GENERATION):
            self.member_id = "" if code == errors.E_UNKNOWN_MEMBER_ID else self.member_id
        if code in (errors.E_NOT_COORDINATOR, errors.E_COORDINATOR_NOT_AVAILABLE):
            self._dead()
        if code == errors.E_INVALID_SESSION_TIMEOUT and not self._warned:
            self._warned = True
            log.warning("Group %s: the broker refuses schema.registry.group.session.timeout.ms=%d "
                        "(INVALID_SESSION_TIMEOUT: outside group.min/max.session.timeout.ms)", self.group_id,
                        self.session_ms)
        log.debug("Group %s: %s", self.group_id, errors.error_name(code))

    async def _join(self) -> bool:
        meta = json.dumps(self.identity).encode()
        resp = await self._call(ApiKey.JOIN_GROUP, {
            "group_id": self.group_id, "session_timeout_ms": self.session_ms, "rebalance_timeout_ms": self.session_ms,
            "member_id": self.member_id, "group_instance_id": None, "protocol_type": PROTOCOL_TYPE,
            "reason": "joining", "protocols": [{"name": PROTOCOL, "metadata": meta}]})
        code = resp["error_code"]
        if code == errors.E_MEMBER_ID_REQUIRED:
            self.member_id = resp["member_id"]
            return False
        if code:
            self._error(code)
            return False
        self.member_id, self.generation = resp["member_id"], resp["generation_id"]
        assignments = []
        if resp["leader"] == self.member_id:
            members = {m["member_id"]: json.loads(bytes(m["metadata"])) for m in resp["members"]}
            eligible = sorted((i["host"], i["port"], m) for m, i in members.items() if i.get("master_eligibility"))
            # the writer stays the writer while it is a member: a process joining moves nothing
            staying = [m for m, i in members.items() if self.leader is not None and i == self.leader]
            chosen = staying[0] if staying else eligible[0][2] if eligible else None
            assignment = json.dumps({"version": 1, "error": 0, "master": chosen,
                                     "master_identity": members[chosen] if chosen else None}).encode()
            assignments = [{"member_id": m, "assignment": assignment} for m in members]
        resp = await self._call(ApiKey.SYNC_GROUP, {
            "group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
            "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "protocol_name": PROTOCOL,
            "assignments": assignments})
        if resp["error_code"]:
            self._error(resp["error_code"])
            return False
        assignment = json.loads(bytes(resp["assignment"] or b"{}") or b"{}")
        self._set_leader(assignment.get("master_identity"))
        return True

    async def _run(self) -> None:
        joined = False
        while not self.stopped:
            try:
                if not joined:
                    joined = await self._join()
                    if not joined:
                        await asyncio.sleep(0.1)
                        continue
                await asyncio.sleep(self.heartbeat_s)
                resp = await self._call(ApiKey.HEARTBEAT, {"group_id": self.group_id,
                                                           "generation_id": self.generation,
                                                           "member_id": self.member_id, "group_instance_id": None})
                if resp["error_code"]:
                    self._error(resp["error_code"])
                    joined = False
            except (*_NETWORK, errors.KafkaError) as e:
                if self.stopped:
                    return
                log.info("Group %s: %s; joining again", self.group_id, e)
                joined = False
                await asyncio.sleep(0.3)

    async def _leave(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self.member_id and self.conn is not None:
            try:
                await asyncio.wait_for(self._call(ApiKey.LEAVE_GROUP, {
                    "group_id": self.group_id, "member_id": self.member_id,
                    "members": [{"member_id": self.member_id, "group_instance_id": None, "reason": "stopping"}]}), 3)
            except Exception:  # noqa: BLE001
                pass
        self._dead()
        if self.cluster is not None:
            await self.cluster.aclose()
