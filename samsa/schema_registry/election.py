"""Electing the registry process that writes, as the Schema Registry does: the processes are
members of a Kafka group (``schema.registry.group.id``, protocol type ``sr``, protocol ``v0``)
on the broker's group coordinator. A member's metadata is its identity as JSON
(``{"version": 1, "host", "port", "scheme", "master_eligibility"}``); the group's leader picks
the current writer if it is still a member, else the first eligible identity (by host, port),
and gives every member the assignment ``{"version": 1, "error": 0, "master": member id,
"master_identity": identity}``. A member steps down when a rebalance starts or it is dropped
from the group (so two processes never write at once); a member that stops heartbeating
(killed) is dropped by the coordinator after its session timeout, and the others' next
generation names a new writer.

The member is Samsa's client group machinery (:class:`GroupMembership`, Kafka's
AbstractCoordinator) with the ``sr`` protocol's hooks, driven on its own event-loop thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any, Callable

from samsa.client.consumer_internals.membership import GroupMembership
from samsa.client.loop import LoopThread
from samsa.client.metadata import ClusterMetadata
from samsa.client.security import security_of

log = logging.getLogger(__name__)

PROTOCOL_TYPE, PROTOCOL = "sr", "v0"


class RegistryMember(GroupMembership):
    protocol_type = PROTOCOL_TYPE

    def __init__(self, cluster: ClusterMetadata, group_id: str, identity: dict,
                 on_writer: Callable[[dict | None], None], session_timeout_ms: int):
        super().__init__(cluster, group_id, session_timeout_ms=session_timeout_ms,
                         rebalance_timeout_ms=session_timeout_ms, heartbeat_interval_ms=max(session_timeout_ms // 3, 100),
                         request_timeout_ms=session_timeout_ms + 5000, retry_backoff_ms=100)
        self.identity = identity
        self.on_writer = on_writer
        self.writer: dict | None = None       # the writer of the last generation (kept by the group leader)
        self.holding = False                  # this generation named a writer that we act on

    def holds_assignment(self) -> bool:
        return self.holding

    def join_protocols(self) -> list[dict[str, Any]]:
        return [{"name": PROTOCOL, "metadata": json.dumps(self.identity).encode()}]

    async def on_join_prepare(self) -> None:
        self._step_down()

    async def on_lost(self) -> None:
        self._step_down()

    def _step_down(self) -> None:
        if self.holding:
            self.holding = False
            self.on_writer(None)

    async def perform_assignment(self, protocol_name: str, members: list[dict[str, Any]]) -> dict[str, bytes]:
        identities = {m["member_id"]: json.loads(bytes(m["metadata"])) for m in members}
        eligible = sorted((i["host"], i["port"], m) for m, i in identities.items() if i.get("master_eligibility"))
        staying = [m for m, i in identities.items() if self.writer is not None and i == self.writer]
        chosen = staying[0] if staying else eligible[0][2] if eligible else None
        assignment = json.dumps({"version": 1, "error": 0, "master": chosen,
                                 "master_identity": identities[chosen] if chosen else None}).encode()
        return {m: assignment for m in identities}

    async def on_join_complete(self, protocol_name: str, assignment: bytes) -> None:
        doc = json.loads(bytes(assignment or b"{}") or b"{}")
        self.writer = doc.get("master_identity")
        self.holding = True
        self.on_writer(self.writer)


class LeaderElector:
    """``on_leader(identity or None, is_self)`` is called from the elector's thread on each change."""

    def __init__(self, client_config: dict[str, Any], group_id: str, identity: dict,
                 on_leader: Callable[[dict | None, bool], None], session_timeout_ms: int = 10000):
        self.client_config, self.group_id, self.identity = client_config, group_id, identity
        self.on_leader = on_leader
        self.session_ms = session_timeout_ms
        self.leader: dict | None = None
        self.stopped = False
        self._thread: LoopThread | None = None
        self._task: Any = None
        self.member: RegistryMember | None = None

    def _set_leader(self, identity: dict | None) -> None:
        if identity == self.leader:
            return
        self.leader = identity
        is_self = identity is not None and identity == self.identity
        if identity is None:
            log.info("Schema registry writer: none while the group rebalances")
        else:
            log.info("Schema registry writer: %s://%s:%s%s", identity["scheme"], identity["host"], identity["port"],
                     " (this process)" if is_self else "")
        try:
            self.on_leader(identity, is_self)
        except Exception:  # noqa: BLE001
            log.exception("on_leader failed")

    def start(self) -> None:
        self._thread = LoopThread("schema-registry-election")
        self._task = asyncio.run_coroutine_threadsafe(self._run(), self._thread.loop)

    async def _run(self) -> None:
        cluster = ClusterMetadata(self.client_config["bootstrap.servers"], client_id="schema-registry-election",
                                  security=security_of(self.client_config))
        self.member = RegistryMember(cluster, self.group_id, self.identity, self._set_leader, self.session_ms)
        warned = False
        while not self.stopped:
            try:
                stable = await self.member.ensure_active(0.5)
            except Exception as e:  # noqa: BLE001 - the group is joined again; one line the first time
                if not warned:
                    log.warning("Group %s: %s (joining again)", self.group_id, e)
                    warned = True
                self.member.fatal = None
                await asyncio.sleep(0.5)
                continue
            await asyncio.sleep(0.5 if stable else 0.05)

    def stop(self) -> None:
        if self._thread is None:
            return
        self.stopped = True
        try:
            asyncio.run_coroutine_threadsafe(self._leave(), self._thread.loop).result(10)
        except Exception:  # noqa: BLE001
            pass
        self._thread.stop()

    async def _leave(self) -> None:
        if self._task is not None:
            self._task.cancel()
        member = self.member
        if member is None:
            return
        try:
            await asyncio.wait_for(member.leave("the schema registry is stopping"), 5)
        except Exception:  # noqa: BLE001
            pass
        try:
            await member.close()
            await member.cluster.aclose()
        except Exception:  # noqa: BLE001
            pass
