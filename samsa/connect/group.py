"""Workers of one ``group.id`` as members of a Kafka group with protocol type ``connect``.

The member is the client's :class:`~samsa.client.consumer_internals.membership.GroupMembership`
with Connect's protocols (Kafka's ConnectProtocol and KIP-415's
IncrementalCooperativeConnectProtocol):

* ``default`` (v0, eager: ``connect.protocol=eager``): metadata ``version int16, url string,
  config_offset int64``; assignment ``version int16, error int16, leader string,
  leader_url string, config_offset int64, [connector string, [task int32]]`` (task -1 stands
  for the connector itself), the member's whole assignment. Everything is given up before
  joining again.
* ``compatible`` (v1, incremental cooperative, ``connect.protocol=compatible``): metadata
  adds the member's current assignment (``allocation``, nullable bytes: an assignment as
  below); the assignment adds ``revoked [connector, [task]]`` and ``scheduled_delay int32``,
  and lists only what is *added*: a member keeps what it runs, stops what is revoked, and
  after a revocation joins again so the leader can hand it to someone else.
* ``sessioned`` (v2, ``connect.protocol=sessioned``, KIP-507): v1's formats with version 2;
  the leader also keeps a session key in the config topic that signs requests between workers.

A worker offers its protocol and every older one, preferred first, so it can share a group
with older workers (the group runs the newest all offer). :class:`IncrementalAssignor` is
the leader's side.

The member only records what a rebalance gave; the herder's thread, which drives it, does
the work (:mod:`samsa.connect.distributed`).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass, field
from typing import Any, Callable

from samsa.client.consumer_internals.membership import GroupMembership
from samsa.client.metadata import ClusterMetadata

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "connect"
EAGER, COMPATIBLE, SESSIONED = "eager", "compatible", "sessioned"  # connect.protocol
PROTOCOL_NAMES = {EAGER: "default", COMPATIBLE: "compatible", SESSIONED: "sessioned"}
VERSIONS = {"default": 0, "compatible": 1, "sessioned": 2}  # JoinGroup protocol name → ConnectProtocol version
CONNECTOR_TASK = -1
NO_ERROR, CONFIG_MISMATCH = 0, 1

Task = tuple[str, int]


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

    def nullable_bytes(self) -> bytes | None:
        n = self.take(">i")
        if n < 0:
            return None
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    @property
    def left(self) -> int:
        return len(self.data) - self.pos


def _encode_items(connectors: list[str], tasks: list[Task]) -> bytes:
    by: dict[str, list[int]] = {}
    for c in connectors:
        by.setdefault(c, []).append(CONNECTOR_TASK)
    for c, t in tasks:
        by.setdefault(c, []).append(t)
    out = struct.pack(">i", len(by))
    for c, ids in by.items():
        out += _str(c) + struct.pack(">i", len(ids)) + b"".join(struct.pack(">i", i) for i in ids)
    return out


def _decode_items(r: _Reader) -> tuple[list[str], list[Task]]:
    connectors: list[str] = []
    tasks: list[Task] = []
    for _ in range(max(r.take(">i"), 0)):
        c = r.string()
        for _ in range(max(r.take(">i"), 0)):
            t = r.take(">i")
            if t == CONNECTOR_TASK:
                connectors.append(c)
            else:
                tasks.append((c, t))
    return connectors, tasks


@dataclass
class ConnectAssignment:
    """One member's assignment: in v1, what is added (``connectors``/``tasks``) and taken away."""

    error: int = NO_ERROR
    leader: str = ""
    leader_url: str = ""
    config_offset: int = -1
    connectors: list[str] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    revoked_connectors: list[str] = field(default_factory=list)
    revoked_tasks: list[Task] = field(default_factory=list)
    delay_ms: int = 0
    version: int = 1

    def encode(self) -> bytes:
        out = struct.pack(">hh", self.version, self.error) + _str(self.leader) + _str(self.leader_url)
        out += struct.pack(">q", self.config_offset) + _encode_items(self.connectors, self.tasks)
        if self.version >= 1:
            out += _encode_items(self.revoked_connectors, self.revoked_tasks) + struct.pack(">i", self.delay_ms)
        return out

    @classmethod
    def decode(cls, data: bytes) -> "ConnectAssignment":
        if not data:
            return cls()
        r = _Reader(data)
        version = r.take(">h")
        a = cls(r.take(">h"), r.string(), r.string(), r.take(">q"), version=version)
        a.connectors, a.tasks = _decode_items(r)
        if version >= 1 and r.left:
            a.revoked_connectors, a.revoked_tasks = _decode_items(r)
            a.delay_ms = r.take(">i") if r.left >= 4 else 0
        return a


@dataclass
class WorkerState:
    """A member's JoinGroup metadata: its REST URL, the config offset it has read, what it runs."""

    url: str
    config_offset: int
    assignment: ConnectAssignment | None = None

    def encode(self, version: int) -> bytes:
        out = struct.pack(">h", version) + _str(self.url) + struct.pack(">q", self.config_offset)
        if version >= 1:
            if self.assignment is None or not (self.assignment.connectors or self.assignment.tasks):
                out += struct.pack(">i", -1)
            else:
                held = ConnectAssignment(**{**self.assignment.__dict__, "version": version})
                raw = held.encode()
                out += struct.pack(">i", len(raw)) + raw
        return out

    @classmethod
    def decode(cls, data: bytes) -> "WorkerState":
        r = _Reader(data)
        version = r.take(">h")
        state = cls(r.string(), r.take(">q"))
        if version >= 1 and r.left >= 4:
            raw = r.nullable_bytes()
            if raw:
                state.assignment = ConnectAssignment.decode(raw)
        return state


# ---------------------------------------------------------------- the leader's assignor


class IncrementalAssignor:
    """KIP-415's leader: keep what runs, revoke what is deleted or duplicated, hold back what a
    departed worker ran for ``scheduled.rebalance.max.delay.ms`` (it may come back), give new
    work to the least loaded workers, and revoke from the most loaded to balance a newcomer
    (not twice in a row).

    The assignor remembers the assignment it last made (``previous``) to tell lost work
    from new; a leader that did not make the previous generation's assignment starts from
    what the members say they run.
    """

    def __init__(self, max_delay_ms: int, clock: Callable[[], float]):
        self.max_delay_ms = max_delay_ms
        self.clock = clock  # seconds
        self.previous: dict[str, tuple[set[str], set[Task]]] = {}
        self.previous_generation = -1
        self.held_lost: tuple[set[str], set[Task]] = (set(), set())
        self.scheduled: float = 0.0  # when the held-back work is given out (0: nothing scheduled)
        self.revoked_in_previous = False
        self.owners: dict[Any, str] = {}  # connector or task → the URL of the worker it was last given to

    def owner_url(self, item: str | Task) -> str | None:
        return self.owners.get(item)

    def assign(self, generation: int, leader: str, leader_url: str, config_offset: int, connectors: list[str],
               tasks: list[Task], members: dict[str, WorkerState], version: int) -> dict[str, ConnectAssignment]:
        """Each member's assignment in the protocol version the group runs (0: eager, everything anew)."""
        eager = version == 0
        ids = sorted(members)
        if eager:
            current: dict[str, tuple[set[str], set[Task]]] = {m: (set(), set()) for m in ids}
            self.previous, self.held_lost, self.scheduled = {}, (set(), set()), 0.0
        else:
            current = {m: (set(s.assignment.connectors), set(s.assignment.tasks)) if s.assignment else (set(), set())
                       for m, s in members.items()}
            if self.previous_generation != generation - 1:
                log.info("The previous generation's assignment (%d) is not this leader's: starting from the members' "
                         "own (generation %d)", self.previous_generation, generation)
                self.previous, self.held_lost, self.scheduled = dict(current), (set(), set()), 0.0
        revoked: dict[str, tuple[set[str], set[Task]]] = {m: (set(), set()) for m in ids}
        added: dict[str, tuple[set[str], set[Task]]] = {m: (set(), set()) for m in ids}
        delay = 0
        configured = (set(connectors), set(tasks))
        new: list[set] = [set(), set()]
        lost: list[set] = [set(), set()]
        for k in (0, 1):
            holders: dict[Any, list[str]] = {}
            for m in ids:
                for item in current[m][k]:
                    holders.setdefault(item, []).append(m)
            for item, ms in holders.items():
                if item not in configured[k] or len(ms) > 1:  # deleted, or run twice
                    for m in ms:
                        revoked[m][k].add(item)
                        current[m][k].discard(item)
            held = set().union(*(current[m][k] for m in ids)) if ids else set()
            before = set().union(*(p[k] for p in self.previous.values())) | self.held_lost[k]
            lost[k] = (before - held) & configured[k]
            new[k] = configured[k] - held - lost[k]
        now = self.clock()
        if lost[0] or lost[1]:
            if self.max_delay_ms <= 0:
                new = [new[0] | lost[0], new[1] | lost[1]]
                self.held_lost, self.scheduled = (set(), set()), 0.0
            elif self.scheduled and now >= self.scheduled:
                empty = [m for m in ids if not current[m][0] and not current[m][1]]
                log.info("The scheduled rebalance delay expired: reassigning lost connectors %s and tasks %s%s",
                         sorted(lost[0]), sorted(lost[1]), f" to new workers {empty}" if empty else "")
                if empty:
                    for k in (0, 1):
                        for i, item in enumerate(sorted(lost[k])):
                            added[empty[i % len(empty)]][k].add(item)
                            current[empty[i % len(empty)]][k].add(item)
                else:
                    new = [new[0] | lost[0], new[1] | lost[1]]
                self.held_lost, self.scheduled = (set(), set()), 0.0
                self.revoked_in_previous = False
            else:
                if not self.scheduled:
                    self.scheduled = now + self.max_delay_ms / 1000
                    log.info("Workers left the group: holding back their connectors %s and tasks %s for %d ms",
                             sorted(lost[0]), sorted(lost[1]), self.max_delay_ms)
                delay = max(int((self.scheduled - now) * 1000), 1)
                self.held_lost = (set(lost[0]), set(lost[1]))
        else:
            self.held_lost, self.scheduled = (set(), set()), 0.0
        if not eager and not delay and ids:
            wanted = self._balance_revocations(ids, current, new, configured)
            if any(wanted[m][0] or wanted[m][1] for m in ids):
                if self.revoked_in_previous:
                    self.revoked_in_previous = False  # no revocations twice in a row: look again later
                    delay = self.max_delay_ms
                    self.scheduled = now + delay / 1000
                else:
                    self.revoked_in_previous = True
                    for m in ids:
                        for k in (0, 1):
                            revoked[m][k].update(wanted[m][k])
                            current[m][k].difference_update(wanted[m][k])
            else:
                self.revoked_in_previous = False
        for k in (0, 1):  # new work to the least loaded
            for item in sorted(new[k]):
                m = min(ids, key=lambda m: (len(current[m][k]), ids.index(m)))
                current[m][k].add(item)
                added[m][k].add(item)
        self.previous = {m: (set(current[m][0]), set(current[m][1])) for m in ids}
        self.previous_generation = generation
        self.owners = {item: members[m].url for m in ids for k in (0, 1) for item in current[m][k]}
        out = {}
        for m in ids:
            out[m] = ConnectAssignment(NO_ERROR, leader, leader_url, config_offset, sorted(added[m][0]),
                                       sorted(added[m][1]), sorted(revoked[m][0]), sorted(revoked[m][1]), delay,
                                       version)
        log.info("Assignment of generation %d by leader %s: %s", generation, leader,
                 {members[m].url: {"connectors": sorted(current[m][0]), "tasks": sorted(current[m][1]),
                                   "revoked": sorted(revoked[m][0]) + sorted(revoked[m][1])} for m in ids})
        return out

    @staticmethod
    def _balance_revocations(ids: list[str], current: dict[str, tuple[set[str], set[Task]]], new: list[set],
                             configured: tuple[set[str], set[Task]]) -> dict[str, tuple[set[str], set[Task]]]:
        """What to take from the most loaded workers so that, with the new work given to the least
        loaded, every worker ends with ⌊n/w⌋ or ⌈n/w⌉ of each kind."""
        wanted: dict[str, tuple[set[str], set[Task]]] = {m: (set(), set()) for m in ids}
        for k in (0, 1):
            total = len(configured[k])
            floor, extra = divmod(total, len(ids))
            loads = sorted(ids, key=lambda m: (-len(current[m][k]), ids.index(m)))
            if all(len(current[m][k]) <= floor + (1 if i < extra else 0) for i, m in enumerate(loads)):
                continue
            below = sum(max(floor - len(current[m][k]), 0) for m in ids)
            if below <= len(new[k]):
                continue  # the new work alone fills the gaps
            for i, m in enumerate(loads):
                allowed = floor + (1 if i < extra else 0)
                excess = len(current[m][k]) - allowed
                if excess > 0:
                    wanted[m][k].update(sorted(current[m][k], reverse=True)[:excess])
        return wanted


# ---------------------------------------------------------------- the member


class ConnectMember(GroupMembership):
    """A worker in the group: offers its URL, config offset and (v1) what it runs; the leader
    asks ``assign`` for everyone's assignment; a member's new assignment waits in ``pending``
    for the herder's thread."""

    protocol_type = PROTOCOL_TYPE

    def __init__(self, cluster: ClusterMetadata, group_id: str, url: str, protocol: str, *,
                 session_timeout_ms: int, rebalance_timeout_ms: int, heartbeat_interval_ms: int,
                 request_timeout_ms: int, retry_backoff_ms: int, config_offset: Callable[[], int],
                 assign: Callable[[int, str, dict[str, WorkerState], int], dict[str, ConnectAssignment]],
                 wake: Callable[[], None]):
        super().__init__(cluster, group_id, session_timeout_ms=session_timeout_ms,
                         rebalance_timeout_ms=rebalance_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
                         request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms)
        self.url = url
        self.mode = protocol
        self.config_offset = config_offset
        self.assign_fn = assign
        self.wake_fn = wake
        self.current = ConnectAssignment()  # what this member holds (the herder runs it)
        self.pending: tuple[ConnectAssignment, int] | None = None

    @property
    def version(self) -> int:
        """The protocol version the group runs (the last one chosen; before that, the one preferred)."""
        return VERSIONS.get(self.protocol_name or PROTOCOL_NAMES[self.mode], 0)

    @property
    def eager(self) -> bool:
        return self.version == 0

    @property
    def sessioned(self) -> bool:
        return self.version >= 2 and self.mode == SESSIONED

    def wake(self) -> None:
        self.wake_fn()

    def holds_assignment(self) -> bool:
        return bool(self.current.connectors or self.current.tasks)

    def join_protocols(self) -> list[dict[str, Any]]:
        state = WorkerState(self.url, self.config_offset(), self.current)
        offered = {EAGER: [EAGER], COMPATIBLE: [COMPATIBLE, EAGER], SESSIONED: [SESSIONED, COMPATIBLE, EAGER]}
        return [{"name": PROTOCOL_NAMES[p], "metadata": state.encode(VERSIONS[PROTOCOL_NAMES[p]])}
                for p in offered[self.mode]]

    async def perform_assignment(self, protocol_name: str, members: list[dict[str, Any]]) -> dict[str, bytes]:
        states = {m["member_id"]: WorkerState.decode(bytes(m["metadata"])) for m in members}
        result = await asyncio.get_running_loop().run_in_executor(None, self.assign_fn, self.generation,
                                                                  self.member_id, states,
                                                                  VERSIONS.get(protocol_name, 0))
        return {m: a.encode() for m, a in result.items()}

    async def on_join_complete(self, protocol_name: str, raw: bytes) -> None:
        assignment = ConnectAssignment.decode(raw)
        self.pending = (assignment, self.generation)
        if assignment.error:
            self.request_rejoin("the leader could not assign (config mismatch)")
        self.wake()
