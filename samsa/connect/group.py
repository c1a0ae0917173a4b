"""Workers of one ``group.id`` as members of a Kafka group with protocol type ``connect``.

The protocol is Kafka's ConnectProtocol v0 (``default``, eager): a member's metadata is
``version int16, url string, config_offset int64``; the leader's assignment for each member is
``version int16, error int16, leader string, leader_url string, config_offset int64,
[connector string, [task int32]]`` where task -1 stands for the connector itself. Eager:
everything is given up before a member joins again.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass, field
from typing import Callable

from samsa.client.connection import BrokerConnection, KafkaConnectionError, KafkaTimeoutError
from samsa.client.metadata import ClusterMetadata
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "connect"
PROTOCOL = "default"
CONNECTOR_TASK = -1
_NETWORK = (KafkaConnectionError, KafkaTimeoutError, OSError, asyncio.TimeoutError)


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def take(self, fmt: str) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str:
        n = self.take(">h")
        s = self.data[self.pos:self.pos + n].decode()
        self.pos += n
        return s


def encode_metadata(url: str, config_offset: int) -> bytes:
    return struct.pack(">h", 0) + _str(url) + struct.pack(">q", config_offset)


def decode_metadata(data: bytes) -> tuple[str, int]:
    r = _Reader(data)
    r.take(">h")
    return r.string(), r.take(">q")


@dataclass
class Assignment:
    error: int = 0
    leader: str = ""
    leader_url: str = ""
    config_offset: int = -1
    connectors: list[str] = field(default_factory=list)
    tasks: list[tuple[str, int]] = field(default_factory=list)

    def encode(self) -> bytes:
        by: dict[str, list[int]] = {}
        for c in self.connectors:
            by.setdefault(c, []).append(CONNECTOR_TASK)
        for c, t in self.tasks:
            by.setdefault(c, []).append(t)
        out = struct.pack(">hh", 0, self.error) + _str(self.leader) + _str(self.leader_url)
        out += struct.pack(">qi", self.config_offset, len(by))
        for c, ids in by.items():
            out += _str(c) + struct.pack(">i", len(ids)) + b"".join(struct.pack(">i", i) for i in ids)
        return out

    @classmethod
    def decode(cls, data: bytes) -> "Assignment":
        if not data:
            return cls()
        r = _Reader(data)
        r.take(">h")
        a = cls(r.take(">h"), r.string(), r.string(), r.take(">q"))
        for _ in range(r.take(">i")):
            c = r.string()
            for _ in range(r.take(">i")):
                t = r.take(">i")
                if t == CONNECTOR_TASK:
                    a.connectors.append(c)
                else:
                    a.tasks.append((c, t))
        return a


class ConnectGroupMember:
    """Joins, syncs and heartbeats; the herder's callbacks run in a thread (they start and stop tasks)."""

    def __init__(self, bootstrap: str, group_id: str, url: str, session_ms: int, rebalance_ms: int,
                 heartbeat_ms: int, config_offset: Callable[[], int],
                 assign: Callable[[str, dict[str, tuple[str, int]]], dict[str, Assignment]],
                 on_assigned: Callable[[Assignment, int], None], on_revoked: Callable[[], None]):
        self.bootstrap, self.group_id, self.url = bootstrap, group_id, url
        self.session_ms, self.rebalance_ms, self.heartbeat_ms = session_ms, rebalance_ms, heartbeat_ms
        self.config_offset, self.assign = config_offset, assign
        self.on_assigned, self.on_revoked = on_assigned, on_revoked
        self.member_id = ""
        self.generation = -1
        self.rejoin = True
        self.holding = False
        self.stopped = False
        self.conn: BrokerConnection | None = None
        self.cluster: ClusterMetadata | None = None

    def request_rejoin(self) -> None:
        self.rejoin = True

    async def _coordinator(self) -> BrokerConnection:
        while self.conn is None or not self.conn.connected:
            try:
                if self.cluster is None:
                    self.cluster = ClusterMetadata(self.bootstrap, client_id=f"connect-{self.url}")
                conn = await self.cluster.any()
                resp = await conn.request(ApiKey.FIND_COORDINATOR, {"key": self.group_id, "key_type": 0,
                                                                    "coordinator_keys": [self.group_id]},
                                          version=conn.pick_version(ApiKey.FIND_COORDINATOR))
                found = resp["coordinators"][0] if "coordinators" in resp and resp["coordinators"] else resp
                if found["error_code"]:
                    raise errors.error_for(found["error_code"], "FindCoordinator")
                self.conn = BrokerConnection(found["host"], found["port"], f"connect-{self.url}",
                                             request_timeout_ms=self.rebalance_ms + 5000)
                await self.conn.connect()
            except (*_NETWORK, errors.KafkaError) as e:
                log.debug("FindCoordinator for %s: %s", self.group_id, e)
                self.conn = None
                await asyncio.sleep(0.5)
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

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopped:
            try:
                if self.rejoin:
                    if self.holding:
                        await loop.run_in_executor(None, self.on_revoked)
                        self.holding = False
                    assignment = await self._join()
                    if assignment is None:
                        await asyncio.sleep(0.2)
                        continue
                    self.rejoin = False
                    await loop.run_in_executor(None, self.on_assigned, assignment, self.generation)
                    self.holding = True
                await self._heartbeat()
            except (*_NETWORK, errors.KafkaError) as e:
                log.info("Group %s: %s; joining again", self.group_id, e)
                self.rejoin = True
                await asyncio.sleep(0.2)
            deadline = loop.time() + self.heartbeat_ms / 1000
            while not self.rejoin and not self.stopped and loop.time() < deadline:
                await asyncio.sleep(0.05)

    async def _join(self) -> Assignment | None:
        body = {"group_id": self.group_id, "session_timeout_ms": self.session_ms,
                "rebalance_timeout_ms": self.rebalance_ms, "member_id": self.member_id, "group_instance_id": None,
                "protocol_type": PROTOCOL_TYPE, "reason": "rebalance",
                "protocols": [{"name": PROTOCOL, "metadata": encode_metadata(self.url, self.config_offset())}]}
        resp = await self._call(ApiKey.JOIN_GROUP, body)
        code = resp["error_code"]
        if code == errors.E_MEMBER_ID_REQUIRED:
            self.member_id = resp["member_id"]
            return None
        if code:
            self._error(code)
            return None
        self.member_id, self.generation = resp["member_id"], resp["generation_id"]
        assignments: dict[str, Assignment] = {}
        if resp["leader"] == self.member_id:
            members = {m["member_id"]: decode_metadata(bytes(m["metadata"])) for m in resp["members"]}
            assignments = await asyncio.get_running_loop().run_in_executor(None, self.assign, self.member_id,
                                                                           members)
        body = {"group_id": self.group_id, "generation_id": self.generation, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": PROTOCOL_TYPE, "protocol_name": PROTOCOL,
                "assignments": [{"member_id": m, "assignment": a.encode()} for m, a in assignments.items()]}
        resp = await self._call(ApiKey.SYNC_GROUP, body)
        if resp["error_code"]:
            self._error(resp["error_code"])
            return None
        log.info("Joined group %s at generation %d as %s (leader: %s)", self.group_id, self.generation,
                 self.member_id, resp.get("protocol_name"))
        return Assignment.decode(bytes(resp["assignment"] or b""))

    def _error(self, code: int) -> None:
        if code in (errors.E_UNKNOWN_MEMBER_ID, errors.E_FENCED_INSTANCE_ID):
            self.member_id = ""
        if code in (errors.E_NOT_COORDINATOR, errors.E_COORDINATOR_NOT_AVAILABLE):
            self._dead()
        log.info("Group %s: %s", self.group_id, errors.error_name(code))

    async def _heartbeat(self) -> None:
        resp = await self._call(ApiKey.HEARTBEAT, {"group_id": self.group_id, "generation_id": self.generation,
                                                   "member_id": self.member_id, "group_instance_id": None})
        code = resp["error_code"]
        if code:
            self._error(code)
            self.rejoin = True

    async def leave(self) -> None:
        self.stopped = True
        if self.member_id and self.conn is not None:
            try:
                await self._call(ApiKey.LEAVE_GROUP, {"group_id": self.group_id, "member_id": self.member_id,
                                                      "members": [{"member_id": self.member_id,
                                                                   "group_instance_id": None, "reason": "stopping"}]})
            except Exception:  # noqa: BLE001
                pass
        self._dead()
        if self.cluster is not None:
            await self.cluster.aclose()
