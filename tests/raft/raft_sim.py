"""A randomised simulation of a KRaft quorum built from ``samsa.raft.consensus.RaftNode`` cores.

Everything runs on simulated time from one ``random.Random(seed)``: a network that loses,
duplicates, delays and so reorders messages and can be partitioned; nodes that crash (their core
and everything volatile gone) and restart from what they persisted (the quorum-state and the log,
each output applied durably in order, as the I/O layer must); clients appending on whichever node
says it leads; nodes taking snapshots of what they committed, so that laggards fetch snapshots;
an observer (a broker) following the log; on odd seeds (kraft.version 1) an admin adding and
removing voters through the leader (KIP-853).

Checked as it runs (``SafetyViolation`` with the seed and the trace's tail):
  * at most one leader per epoch;
  * committed entries are never lost or changed: every offset any node reports committed holds,
    on that node, the same record as everywhere else it was reported; a new leader's log holds all
    of them (leader completeness);
  * logs never diverge below the high watermark: at the end, each node's log below its high
    watermark is the committed log;
  * a node's high watermark never goes back within a life (the core refuses), and after a restart
    the first high watermark it learns is not below what it had committed before the crash;
  * liveness: once the network heals and every node is up, a leader is elected and commits a new
    append within ``LIVENESS_BOUND_MS`` of simulated time.
"""

from __future__ import annotations

import dataclasses
import heapq
import random
from dataclasses import dataclass, field

from samsa.raft.consensus import RaftConfig, RaftNode, RaftState, LogState
from samsa.raft.messages import (AddRaftVoterRequest, AddRaftVoterResponse, RemoveRaftVoterRequest,
                                 RemoveRaftVoterResponse, SnapshotLoaded, Append, AppendRefused, Appended, AppendToLog, Committed, DeleteLogBefore,
                                 FetchResponse, FetchSnapshotResponse, InstallSnapshot, LeaderChanged,
                                 PersistQuorumState, Received, RecordsRange, Resign, Send, SetTimer, SnapshotChunk,
                                 SnapshotId, SnapshotTaken, TimerExpired, TruncateTo, WriteSnapshotChunk)

CONFIG = RaftConfig(election_timeout_ms=150, election_backoff_max_ms=150, fetch_timeout_ms=300,
                    request_timeout_ms=200, retry_backoff_ms=10, fetch_max_wait_ms=100, snapshot_max_bytes=64)
CHAOS_MS = 2500
LIVENESS_BOUND_MS = 4000
MAX_BATCHES_PER_FETCH = 8


class SafetyViolation(AssertionError):
    pass


@dataclass
class Disk:
    """What survives a crash: the quorum-state and the log (with its snapshot)."""
    quorum_state: object = None
    batches: list = field(default_factory=list)
    records: list = field(default_factory=list)        # one (epoch, data, index in batch) per offset >= start
    start: int = 0
    snapshot: tuple | None = None                     # (SnapshotId, bytes, records tuple, voters)
    partial_snapshot: bytearray | None = None

    def end(self) -> int:
        return self.start + len(self.records)

    def record(self, offset: int):
        if offset < self.start:
            return self.snapshot[2][offset]
        return self.records[offset - self.start]

    def log_state(self) -> LogState:
        epochs = []
        for b in self.batches:
            if not epochs or b.epoch != epochs[-1][0]:
                epochs.append((b.epoch, b.base_offset))
        snap = (self.snapshot[0], len(self.snapshot[1])) if self.snapshot else None
        voter_sets = tuple((b.base_offset, b.voters) for b in self.batches if b.voters is not None)
        return LogState(self.start, self.end(), tuple(epochs), snap,
                        voters=self.snapshot[3] if self.snapshot else None, voter_sets=voter_sets)

    def voters_before(self, offset: int, bootstrap) -> frozenset:
        sets = [b.voters for b in self.batches if b.voters is not None and b.base_offset < offset]
        return sets[-1] if sets else (self.snapshot[3] if self.snapshot else frozenset(bootstrap))


@dataclass
class Node:
    id: int
    disk: Disk = field(default_factory=Disk)
    core: RaftNode | None = None
    life: int = 0
    timer_gen: int = 0
    hw: int = 0                 # the high watermark this life (0 if unknown)
    hw_before_crash: int = 0    # the highest committed offset of earlier lives
    learned_since_restart: bool = True


def snapshot_bytes(records, voters) -> bytes:
    return repr((records, tuple(sorted(voters)))).encode()


class Simulation:
    def __init__(self, seed: int, n: int, *, observers: int = 2, chaos_ms: int = CHAOS_MS, bug=None,
                 dynamic: bool | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        self.n = n
        self.voter_ids = list(range(1, n + 1))
        self.ids = list(range(1, n + 1 + observers))    # observers (brokers) fetch too, never vote
        self.nodes = {i: Node(i) for i in self.ids}
        self.now = 0
        self.queue: list = []
        self.seq = 0
        self.trace: list = []
        self.leaders: dict[int, int] = {}      # epoch -> leader
        self.committed: list = []               # the committed log, one record per offset
        self.partition: dict[int, int] | None = None   # node -> side
        self.loss = self.rng.choice([0.0, 0.02, 0.1, 0.25])
        self.dup = self.rng.choice([0.0, 0.02, 0.1])
        self.max_delay = self.rng.choice([5, 20, 60])
        self.chaos_ms = chaos_ms
        self.healed = False
        self.appends = 0
        self.live_commit: int | None = None     # the offset of the post-heal append, once committed
        self.live_data: set = set()              # the data of the appends made after the heal
        self.bug = bug
        # KIP-853: half the seeds add and remove voters (kraft.version 1)
        self.dynamic = seed % 2 == 1 if dynamic is None else dynamic
        self.voter_changes = 0

    # ---- plumbing ----

    def log(self, *what) -> None:
        self.trace.append((self.now,) + what)

    def fail(self, message: str) -> None:
        tail = "\n".join(f"{t:>7} " + " ".join(_fmt(w) for w in what) for t, *what in self.trace[-150:])
        raise SafetyViolation(f"seed={self.seed} n={self.n}: {message}\n--- last events ---\n{tail}")

    def at(self, time: int, kind: str, *payload) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (time, self.seq, kind, payload))

    # ---- nodes ----

    def boot(self, node: Node) -> None:
        node.life += 1
        node.hw = node.disk.snapshot[0].end_offset if node.disk.snapshot else 0
        node.learned_since_restart = False
        node.core = RaftNode(node.id, self.voter_ids, cluster_id="sim", config=CONFIG,
                             quorum_state=node.disk.quorum_state, log=node.disk.log_state(),
                             rng=random.Random(self.rng.random()), kraft_version=int(self.dynamic))
        if self.bug == "forget_vote":
            node.core.voted_id = -1
        outputs = node.core.start(self.now)
        self.log(node.id, "boot", node.core.state.value, "epoch", node.core.epoch)
        self.apply(node, outputs)

    def crash(self, node: Node) -> None:
        if node.core is None:
            return
        node.hw_before_crash = max(node.hw_before_crash, node.hw)
        node.core = None
        node.disk.partial_snapshot = None
        node.timer_gen += 1
        self.log(node.id, "CRASH")

    def step(self, node: Node, event) -> None:
        if node.core is None:
            return
        self.apply(node, node.core.handle(event, self.now))

    def apply(self, node: Node, outputs) -> None:
        disk = node.disk
        for o in outputs:
            if isinstance(o, Send):
                self.send(node.id, o)
            elif isinstance(o, SetTimer):
                node.timer_gen += 1
                self.at(max(o.deadline_ms, self.now), "timer", node.id, node.timer_gen)
            elif isinstance(o, PersistQuorumState):
                disk.quorum_state = o.state
            elif isinstance(o, AppendToLog):
                for b in o.batches:
                    if b.base_offset != disk.end():
                        self.fail(f"node {node.id} appends at {b.base_offset} to a log ending at {disk.end()}")
                    disk.batches.append(b)
                    disk.records.extend((b.epoch, b.data, k) for k in range(b.last_offset - b.base_offset + 1))
                self.log(node.id, "append", [(b.base_offset, b.last_offset, b.epoch) for b in o.batches])
            elif isinstance(o, TruncateTo):
                keep = [b for b in disk.batches if b.last_offset < o.offset]
                if keep and keep[-1].last_offset + 1 != o.offset or not keep and o.offset != disk.start:
                    self.fail(f"node {node.id} truncates to {o.offset}, not a batch boundary")
                disk.batches = keep
                del disk.records[o.offset - disk.start:]
                self.log(node.id, "truncate", o.offset)
            elif isinstance(o, WriteSnapshotChunk):
                if o.position == 0:
                    disk.partial_snapshot = bytearray()
                if disk.partial_snapshot is None or len(disk.partial_snapshot) != o.position:
                    self.fail(f"node {node.id} writes a snapshot chunk at {o.position} out of order")
                disk.partial_snapshot += o.data
            elif isinstance(o, InstallSnapshot):
                raw = bytes(disk.partial_snapshot)
                records, voters = eval(raw.decode())   # noqa: S307 (the simulation's own repr)
                disk.snapshot = (o.snapshot_id, raw, tuple(records), frozenset(voters))
                disk.partial_snapshot = None
                disk.batches, disk.records, disk.start = [], [], o.snapshot_id.end_offset
                self.log(node.id, "install snapshot", o.snapshot_id, sorted(voters))
                self.step(node, SnapshotLoaded(o.snapshot_id, frozenset(voters)))
            elif isinstance(o, DeleteLogBefore):
                drop = o.offset - disk.start
                disk.batches = [b for b in disk.batches if b.base_offset >= o.offset]
                del disk.records[:drop]
                disk.start = o.offset
                self.log(node.id, "delete before", o.offset)
            elif isinstance(o, Committed):
                self.committed_at(node, o.high_watermark)
            elif isinstance(o, LeaderChanged):
                self.log(node.id, "leader", o.leader.leader_id, "epoch", o.leader.leader_epoch,
                         node.core.state.value if node.core else "")
                if o.leader.leader_id == node.id:
                    self.became_leader(node, o.leader.leader_epoch)
            elif isinstance(o, Appended):
                self.log(node.id, "appended", o.base_offset, o.last_offset, "epoch", o.epoch)
                if self.healed:
                    data = disk.record(o.base_offset)[1]
                    self.live_data.add(data)
                    # (a single-voter leader's Committed comes before its Appended)
                    if (self.live_commit is None and o.base_offset < len(self.committed)
                            and self.committed[o.base_offset][1] == data):
                        self.live_commit = self.now
            elif isinstance(o, AppendRefused):
                pass

    # ---- the checks ----

    def became_leader(self, node: Node, epoch: int) -> None:
        other = self.leaders.setdefault(epoch, node.id)
        if other != node.id:
            self.fail(f"two leaders in epoch {epoch}: {other} and {node.id}")
        disk = node.disk
        for off in range(len(self.committed)):
            if off >= disk.end() or disk.record(off) != self.committed[off]:
                self.fail(f"leader {node.id} of epoch {epoch} lacks committed offset {off}")

    def committed_at(self, node: Node, hw: int) -> None:
        disk = node.disk
        if not node.learned_since_restart:
            node.learned_since_restart = True
            if hw < node.hw_before_crash:
                self.fail(f"node {node.id} restarted with high watermark {hw} below {node.hw_before_crash} "
                          "committed before its crash")
        if hw < node.hw:
            self.fail(f"node {node.id} high watermark back from {node.hw} to {hw}")
        if hw > disk.end():
            self.fail(f"node {node.id} high watermark {hw} beyond its log end {disk.end()}")
        lo = min(node.hw, len(self.committed))
        for off in range(lo, hw):
            rec = disk.record(off)
            if off < len(self.committed):
                if self.committed[off] != rec:
                    self.fail(f"offset {off} committed as {self.committed[off]} but node {node.id} commits {rec}")
            else:
                self.committed.append(rec)
                if rec[1] in self.live_data and self.live_commit is None:
                    self.live_commit = self.now
        node.hw = hw
        self.log(node.id, "hw", hw)

    def final_check(self) -> None:
        for node in self.nodes.values():
            if node.core is None:
                continue
            hw = node.core.high_watermark or 0
            for off in range(hw):
                if off >= len(self.committed) or node.disk.record(off) != self.committed[off]:
                    self.fail(f"node {node.id}'s log differs from the committed log at {off} (its hw {hw})")

    # ---- network ----

    def connected(self, a: int, b: int) -> bool:
        return self.partition is None or self.partition[a] == self.partition[b]

    def send(self, src: int, out: Send) -> None:
        msg = out.message
        if isinstance(msg, FetchResponse) and isinstance(msg.records, RecordsRange):
            disk = self.nodes[src].disk
            batches = tuple(b for b in disk.batches if msg.records.start_offset <= b.base_offset
                            < msg.records.end_offset)[:MAX_BATCHES_PER_FETCH]
            msg = dataclasses.replace(msg, records=batches)
        elif isinstance(msg, FetchSnapshotResponse) and isinstance(msg.unaligned_records, SnapshotChunk):
            chunk = msg.unaligned_records
            raw = self.nodes[src].disk.snapshot[1]
            msg = dataclasses.replace(msg, unaligned_records=raw[chunk.position:chunk.position + chunk.max_bytes])
        if out.destination == 0:       # the admin client's answers
            self.log(src, "-> admin", msg)
            if msg.error_code == 0:
                self.voter_changes += 1
            return
        if not self.connected(src, out.destination):
            return
        copies = 1
        if not self.healed:
            if self.rng.random() < self.loss:
                return
            if self.rng.random() < self.dup:
                copies = 2
        for _ in range(copies):
            delay = self.rng.randint(1, self.max_delay if not self.healed else 5)
            self.at(self.now + delay, "deliver", src, out.destination, msg, out.correlation_id)

    # ---- the run ----

    def run(self) -> "Simulation":
        for node in self.nodes.values():
            self.boot(node)
        self.at(self.rng.randint(5, 40), "client")
        self.at(self.rng.randint(100, 300), "nemesis")
        self.at(self.chaos_ms, "heal")
        end = self.chaos_ms + LIVENESS_BOUND_MS
        while self.queue:
            time, _, kind, payload = heapq.heappop(self.queue)
            if time > end:
                break
            self.now = time
            getattr(self, "on_" + kind)(*payload)
            if self.live_commit is not None:
                break
        if self.live_commit is None:
            states = {i: (n.core.state.value, n.core.epoch, n.core.leader_id) if n.core else "down"
                      for i, n in self.nodes.items()}
            self.fail(f"no leader committed an append within {LIVENESS_BOUND_MS} ms of the heal: {states}")
        self.final_check()
        return self

    def on_timer(self, node_id: int, gen: int) -> None:
        node = self.nodes[node_id]
        if node.core is not None and gen == node.timer_gen:
            self.step(node, TimerExpired())

    def on_deliver(self, src: int, dst: int, msg, correlation_id: int) -> None:
        if not self.connected(src, dst):
            return
        node = self.nodes[dst]
        if node.core is None:
            return
        self.log(src, "->", dst, msg)
        self.step(node, Received(src, msg, correlation_id))

    def on_client(self) -> None:
        leaders = [n for n in self.nodes.values() if n.core is not None and n.core.state == RaftState.LEADER]
        if leaders:
            node = self.rng.choice(leaders)
            self.appends += 1
            self.step(node, Append(f"r{self.appends}", self.rng.choice([1, 1, 2, 3])))
        self.at(self.now + self.rng.randint(10, 60), "client")

    def on_nemesis(self) -> None:
        if self.healed:
            return
        r = self.rng.random()
        ids = self.ids
        if r < 0.15:
            lone = self.rng.choice(ids)
            self.partition = {i: int(i == lone) for i in ids}
            self.log("nemesis: isolate", lone)
        elif r < 0.3:
            side = set(self.rng.sample(ids, self.rng.randint(1, len(ids) // 2)))
            self.partition = {i: int(i in side) for i in ids}
            self.log("nemesis: split", sorted(side))
        elif r < 0.45:
            self.partition = None
            self.log("nemesis: heal partition")
        elif r < 0.65:
            node = self.nodes[self.rng.choice(ids)]
            self.crash(node)
        elif r < 0.8:
            down = [n for n in self.nodes.values() if n.core is None]
            if down:
                self.boot(self.rng.choice(down))
        elif r < 0.87:
            node = self.nodes[self.rng.choice(ids)]
            self.take_snapshot(node)
        elif r < 0.95 and self.dynamic:
            leaders = [n for n in self.nodes.values() if n.core is not None and n.core.state == RaftState.LEADER]
            if leaders:
                leader = self.rng.choice(leaders)
                for _ in range(self.rng.choice([1, 1, 2, 3])):     # bursts: one change at a time?
                    if leader.core is None or leader.core.state != RaftState.LEADER:
                        break
                    voters = leader.core.voters
                    others = [i for i in ids if i not in voters]
                    if others and (self.rng.random() < 0.5 or len(voters) == 1):
                        req = AddRaftVoterRequest("sim", self.rng.choice(others))
                    else:
                        req = RemoveRaftVoterRequest("sim", self.rng.choice(sorted(voters)))
                    self.seq += 1
                    self.log("nemesis: admin", req)
                    self.step(leader, Received(0, req, self.seq))
        else:
            leaders = [n for n in self.nodes.values() if n.core is not None and n.core.state == RaftState.LEADER]
            if leaders:
                self.log("nemesis: resign", leaders[0].id)
                self.step(leaders[0], Resign())
        self.at(self.now + self.rng.randint(50, 400), "nemesis")

    def take_snapshot(self, node: Node) -> None:
        if node.core is None or not node.core.high_watermark:
            return
        hw = node.core.high_watermark
        if hw <= node.disk.start:
            return
        records = tuple(node.disk.record(off) for off in range(hw))
        voters = node.disk.voters_before(hw, self.voter_ids)
        raw = snapshot_bytes(records, voters)
        epoch = node.disk.record(hw - 1)[0]
        sid = SnapshotId(hw, epoch)
        node.disk.snapshot = (sid, raw, records, voters)
        self.log(node.id, "snapshot", sid)
        self.step(node, SnapshotTaken(sid, len(raw)))

    def on_heal(self) -> None:
        self.healed = True
        self.partition = None
        self.log("nemesis: HEAL all")
        for node in self.nodes.values():
            if node.core is None:
                self.boot(node)


def _fmt(msg) -> str:
    if not dataclasses.is_dataclass(msg):
        return str(msg)
    d = {f.name: getattr(msg, f.name) for f in dataclasses.fields(msg)}
    if isinstance(msg, FetchResponse):
        if isinstance(msg.records, tuple):
            d["records"] = [(b.base_offset, b.last_offset, b.epoch) for b in msg.records]
    elif isinstance(msg, FetchSnapshotResponse):
        d["unaligned_records"] = len(msg.unaligned_records) if isinstance(msg.unaligned_records, bytes) else "?"
    d.pop("cluster_id", None)
    return type(msg).__name__ + str(d)
