"""KRaft's consensus (KIP-595, with KIP-996 pre-vote) as one sans-I/O state machine.

One replica of the metadata partition: ``RaftNode.handle(event, now_ms)`` takes an event (a
received request or response, a request that will get no answer, a timer expiry, an append, a
snapshot taken; ``samsa.raft.messages``)
and returns the outputs for the driver to carry out *in order*: persist the quorum state, write or
truncate the log, send messages, report the high watermark, set the next timer. No sockets, no
clocks, no threads; randomness (election timeout jitter) comes from the ``random.Random`` given.

States (``RaftState``) and what moves between them is one table, ``TRANSITIONS``: for each
(state, event kind) the handler and the states it may lead to; ``RaftNode`` refuses any other
move. The rules, from KIP-595 and KIP-996:

* Epochs only grow. A message of a higher epoch moves any state to Follower of its leader, or to
  Unattached in that epoch when it names none; one of a lower epoch is answered with
  FENCED_LEADER_EPOCH.
* One vote per epoch, persisted (quorum-state) before the answer goes out. A vote is granted only
  to a log at least as up to date: (last epoch, end offset) compared in that order.
* Pre-vote (KIP-996): a voter whose election timeout passes becomes Prospective and asks for
  pre-votes for the next epoch without bumping its own; only with a majority does it become
  Candidate (epoch + 1, votes for itself). Granting a pre-vote changes nothing; a follower that
  hears from its leader refuses them.
* The leader writes a LeaderChange control batch at the start of its epoch; the high watermark
  is the offset a majority of voters (the leader's log end and the followers' fetch offsets) has
  reached, and only moves once that is past the epoch's start offset; it never goes back.
* A Fetch is checked against the leader's log: below the log start (or an epoch older than the
  snapshot) it is answered with the latest SnapshotId, and an epoch/offset the leader's log does
  not have with DivergingEpoch (the largest epoch not above the fetcher's and where it ends), so
  the follower truncates and fetches again; a follower never truncates below its high watermark.
* A leader that has not heard a Fetch from a majority within 1.5 fetch timeouts resigns (check
  quorum); a follower that has not heard from its leader within the fetch timeout becomes
  Prospective.

* Dynamic voters (KIP-853, with kraft.version 1): the voter set is the last VotersRecord in the
  log, in force once appended (truncation undoes it); the leader takes one AddRaftVoter or
  RemoveRaftVoter at a time, only after an offset of its epoch is committed, adds only a caught-up
  observer, and answers once the change is committed; a leader that removed itself resigns.
  Replicas vote whatever their own membership (their set may be stale), and one that a change not
  yet committed removes still stands for election. The core keeps no endpoints: an
  UpdateRaftVoter (in the leader's epoch, for a voter) appends a VotersRecord of the same set, in
  which the I/O layer writes the voter's new endpoints, and is answered at once, as Kafka's
  leader answers it (with static voters it writes nothing and answers a voter with success).
* The first leader of a dynamic quorum (nothing of the voter set in its log yet) writes the voter
  set beside its LeaderChange, in the same control batch of three records.
* Observers (brokers) fetch like followers and never vote; without a leader they ask the
  bootstrap servers in turn.
* A request is retried after the backoff once it is answered with an error, its connection
  failed (``RequestFailed``) or its request timeout passed, whichever comes first.
"""

from __future__ import annotations

import enum
import random
from dataclasses import dataclass, field
from typing import Callable

from samsa.protocol.errors import (E_DUPLICATE_VOTER, E_FENCED_LEADER_EPOCH, E_INCONSISTENT_CLUSTER_ID,
                                   E_INVALID_REQUEST, E_NOT_LEADER_OR_FOLLOWER, E_POSITION_OUT_OF_RANGE,
                                   E_REQUEST_TIMED_OUT, E_SNAPSHOT_NOT_FOUND, E_UNKNOWN_LEADER_EPOCH,
                                   E_UNSUPPORTED_VERSION, E_VOTER_NOT_FOUND)
from samsa.raft.messages import (NO_HW, NO_ID, AddRaftVoterRequest, AddRaftVoterResponse, Append, AppendRefused,
                                 Appended, AppendToLog, Batch, RemoveRaftVoterRequest, RemoveRaftVoterResponse,
                                 SnapshotLoaded, UpdateRaftVoterRequest, UpdateRaftVoterResponse,
                                 BeginQuorumEpochRequest, BeginQuorumEpochResponse, Committed, DeleteLogBefore,
                                 EndQuorumEpochRequest, EndQuorumEpochResponse, EpochEndOffset, FetchRequest,
                                 FetchResponse, FetchSnapshotRequest, FetchSnapshotResponse, InstallSnapshot,
                                 LeaderChanged, LeaderIdAndEpoch, PersistQuorumState, Received, RecordsRange,
                                 RequestFailed, Resign, Send, SetTimer, SnapshotChunk, SnapshotId, SnapshotTaken,
                                 TimerExpired, TruncateTo, VoteRequest, VoteResponse, WriteSnapshotChunk)
from samsa.raft.quorum_state import QuorumStateData



class RaftInvariantError(AssertionError):
    """The core was asked to break one of Raft's rules (a bug in it or its driver)."""


class RaftState(enum.Enum):
    UNATTACHED = "Unattached"
    PROSPECTIVE = "Prospective"
    CANDIDATE = "Candidate"
    LEADER = "Leader"
    FOLLOWER = "Follower"
    RESIGNED = "Resigned"


class Ev(enum.Enum):
    """Event kinds of the transition table: received messages, timers, the user's calls, and
    HIGHER_EPOCH (a message of a newer epoch, seen before its own handling)."""
    VOTE_REQUEST = "VoteRequest"
    VOTE_RESPONSE = "VoteResponse"
    BEGIN_EPOCH_REQUEST = "BeginQuorumEpochRequest"
    BEGIN_EPOCH_RESPONSE = "BeginQuorumEpochResponse"
    END_EPOCH_REQUEST = "EndQuorumEpochRequest"
    END_EPOCH_RESPONSE = "EndQuorumEpochResponse"
    FETCH_REQUEST = "FetchRequest"
    FETCH_RESPONSE = "FetchResponse"
    FETCH_SNAPSHOT_REQUEST = "FetchSnapshotRequest"
    FETCH_SNAPSHOT_RESPONSE = "FetchSnapshotResponse"
    HIGHER_EPOCH = "higher epoch"
    ELECTION_TIMEOUT = "election timeout"
    FETCH_TIMEOUT = "fetch timeout"
    CHECK_QUORUM_TIMEOUT = "check quorum timeout"
    APPEND = "append"
    RESIGN = "resign"
    SNAPSHOT_TAKEN = "snapshot taken"
    SNAPSHOT_LOADED = "snapshot loaded"
    ADD_VOTER_REQUEST = "AddRaftVoterRequest"
    REMOVE_VOTER_REQUEST = "RemoveRaftVoterRequest"
    UPDATE_VOTER_REQUEST = "UpdateRaftVoterRequest"


_MESSAGE_EVENTS = {
    VoteRequest: Ev.VOTE_REQUEST, VoteResponse: Ev.VOTE_RESPONSE,
    BeginQuorumEpochRequest: Ev.BEGIN_EPOCH_REQUEST, BeginQuorumEpochResponse: Ev.BEGIN_EPOCH_RESPONSE,
    EndQuorumEpochRequest: Ev.END_EPOCH_REQUEST, EndQuorumEpochResponse: Ev.END_EPOCH_RESPONSE,
    FetchRequest: Ev.FETCH_REQUEST, FetchResponse: Ev.FETCH_RESPONSE,
    FetchSnapshotRequest: Ev.FETCH_SNAPSHOT_REQUEST, FetchSnapshotResponse: Ev.FETCH_SNAPSHOT_RESPONSE,
    AddRaftVoterRequest: Ev.ADD_VOTER_REQUEST, RemoveRaftVoterRequest: Ev.REMOVE_VOTER_REQUEST,
    UpdateRaftVoterRequest: Ev.UPDATE_VOTER_REQUEST,
}


@dataclass(frozen=True)
class RaftConfig:
    """The ``controller.quorum.*`` settings the core uses (milliseconds), with Kafka's defaults."""
    election_timeout_ms: int = 1000          # controller.quorum.election.timeout.ms
    election_backoff_max_ms: int = 1000      # controller.quorum.election.backoff.max.ms
    fetch_timeout_ms: int = 2000             # controller.quorum.fetch.timeout.ms
    request_timeout_ms: int = 2000           # controller.quorum.request.timeout.ms
    retry_backoff_ms: int = 20               # controller.quorum.retry.backoff.ms
    fetch_max_wait_ms: int = 500             # the long poll of a follower's Fetch
    snapshot_max_bytes: int = 2**31 - 1      # FetchSnapshot MaxBytes


@dataclass(frozen=True)
class LogState:
    """What a restarted node knows of its persisted log: its start and end offsets, the leader
    epoch of each run of batches (the leader-epoch checkpoint: (epoch, start offset) pairs in
    order) and the latest snapshot (whose end offset is the log start when present); the voter set
    at the log start (the snapshot's or bootstrap checkpoint's VotersRecord; None: the static
    voters given) and each VotersRecord in the log as (offset, voters) (KIP-853)."""
    start_offset: int = 0
    end_offset: int = 0
    epochs: tuple[tuple[int, int], ...] = ()
    snapshot: tuple[SnapshotId, int] | None = None   # (id, size in bytes)
    voters: frozenset | None = None
    voter_sets: tuple[tuple[int, frozenset], ...] = ()


class _Log:
    """The core's view of the log: offsets and epochs, never record bytes."""

    def __init__(self, state: LogState):
        self.start = state.start_offset
        self.end = state.end_offset
        self.epochs: list[list[int]] = [list(e) for e in state.epochs]
        self.snapshot: SnapshotId | None = state.snapshot[0] if state.snapshot else None
        self.snapshot_size = state.snapshot[1] if state.snapshot else 0
        self.base_voters: frozenset | None = state.voters
        self.voter_sets: list[tuple[int, frozenset]] = list(state.voter_sets)

    def voters(self) -> frozenset:
        return self.voter_sets[-1][1] if self.voter_sets else self.base_voters

    def last_voters_offset(self) -> int:
        return self.voter_sets[-1][0] if self.voter_sets else -1

    def last_epoch(self) -> int:
        if self.epochs:
            return self.epochs[-1][0]
        return self.snapshot.epoch if self.snapshot else 0

    def end_offset_for_epoch(self, epoch: int) -> EpochEndOffset:
        """The largest epoch of the log not above ``epoch`` and the offset where it ends."""
        for i in range(len(self.epochs) - 1, -1, -1):
            e, _ = self.epochs[i]
            if e <= epoch:
                end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.end
                return EpochEndOffset(e, end)
        if self.snapshot is not None:
            return EpochEndOffset(self.snapshot.epoch, self.start)
        return EpochEndOffset(0, 0)

    def append(self, batch: Batch) -> None:
        if batch.base_offset != self.end:
            raise RaftInvariantError(f"batch at {batch.base_offset} appended to a log ending at {self.end}")
        if not self.epochs or batch.epoch > self.epochs[-1][0]:
            if batch.epoch < self.last_epoch():
                raise RaftInvariantError(f"batch of epoch {batch.epoch} after epoch {self.last_epoch()}")
            self.epochs.append([batch.epoch, batch.base_offset])
        elif batch.epoch < self.epochs[-1][0]:
            raise RaftInvariantError(f"batch of epoch {batch.epoch} after epoch {self.epochs[-1][0]}")
        self.end = batch.last_offset + 1
        if batch.voters is not None:
            self.voter_sets.append((batch.base_offset, frozenset(batch.voters)))

    def truncate(self, offset: int) -> None:
        self.end = offset
        while self.epochs and self.epochs[-1][1] >= offset:
            self.epochs.pop()
        while self.voter_sets and self.voter_sets[-1][0] >= offset:
            self.voter_sets.pop()

    def reset_to_snapshot(self, snapshot: SnapshotId, size: int) -> None:
        self.snapshot, self.snapshot_size = snapshot, size
        self.start = self.end = snapshot.end_offset
        self.epochs = []
        self.base_voters, self.voter_sets = self.voters(), []   # until the snapshot's own is loaded

    def drop_before(self, snapshot: SnapshotId, size: int) -> None:
        """A snapshot of a prefix of this log: the log now starts at its end."""
        self.snapshot, self.snapshot_size = snapshot, size
        self.start = snapshot.end_offset
        folded = [vs for vs in self.voter_sets if vs[0] < self.start]
        if folded:
            self.base_voters = folded[-1][1]
        self.voter_sets = [vs for vs in self.voter_sets if vs[0] >= self.start]
        keep = [e for e in self.epochs if e[1] >= self.start]
        before = [e for e in self.epochs if e[1] < self.start]
        if before and (not keep or keep[0][1] > self.start):
            keep.insert(0, [before[-1][0], self.start])
        self.epochs = keep if self.end > self.start else []

    def validate(self, fetch_offset: int, last_fetched_epoch: int) -> EpochEndOffset | SnapshotId | None:
        """A fetcher's position checked against this log: None if it is a prefix of it, else the
        SnapshotId to fetch or the EpochEndOffset where the logs diverge."""
        if fetch_offset == 0 and self.start == 0 and last_fetched_epoch <= 0:
            return None
        snap = self.snapshot
        if snap is not None and (fetch_offset < self.start
                                 or (fetch_offset == self.start and last_fetched_epoch != snap.epoch)
                                 or last_fetched_epoch < snap.epoch):
            return snap
        if fetch_offset < self.start:    # no snapshot, yet the log does not start at 0: cannot happen
            raise RaftInvariantError(f"fetch at {fetch_offset} below log start {self.start} without a snapshot")
        end = self.end_offset_for_epoch(last_fetched_epoch)
        if end.epoch != last_fetched_epoch or end.end_offset < fetch_offset:
            return end
        return None


@dataclass
class _Inflight:
    correlation_id: int
    kind: type
    deadline: int


@dataclass
class _Voter:
    """The leader's view of one replica."""
    end_offset: int = -1        # its last valid fetch offset
    last_fetch_ms: int = -1     # when that fetch came (check quorum, DescribeQuorum)
    last_caught_up_ms: int = -1  # the last fetch at the leader's log end (DescribeQuorum)
    acked: bool = False         # it answered BeginQuorumEpoch or fetched in this epoch


@dataclass
class _Parked:
    """A Fetch the leader holds until there is news for it or its MaxWaitMs passes."""
    correlation_id: int
    request: FetchRequest
    deadline: int


@dataclass
class _Volatile:
    """What the current state knows and forgets on a transition."""
    election_deadline: int | None = None
    fetch_deadline: int | None = None
    check_quorum_deadline: int | None = None
    granted: set = field(default_factory=set)
    rejected: set = field(default_factory=set)
    voters: dict = field(default_factory=dict)          # leader: id -> _Voter
    observers: dict = field(default_factory=dict)       # leader: id -> _Voter, for fetchers that do not vote
    parked: dict = field(default_factory=dict)          # leader: id -> _Parked
    epoch_start_offset: int = -1                        # leader
    fetched_from_leader: bool = False                   # follower: a fetch answer of this epoch came
    snapshot_fetch: tuple | None = None                 # follower: (SnapshotId, position)
    preferred: tuple = ()                               # resigned: EndQuorumEpoch's preferred candidates
    pending_change: tuple | None = None                 # leader: (offset, source, correlation id, response type)
    loading_snapshot: bool = False                      # follower: InstallSnapshot given, SnapshotLoaded not yet
    next_send: dict = field(default_factory=dict)       # destination -> earliest time for a new request


@dataclass(frozen=True)
class Transition:
    handler: Callable
    to: frozenset


class RaftNode:
    """One voter (or observer) of the metadata partition. Build it with what is persisted (the
    quorum state and the log's offsets), call ``start(now)``, then ``handle(event, now)`` for each
    event; each call returns the outputs to carry out in order."""

    def __init__(self, node_id: int, voters, *, cluster_id: str | None = None, config: RaftConfig = RaftConfig(),
                 quorum_state: QuorumStateData | None = None, log: LogState = LogState(),
                 rng: random.Random | None = None, bootstrap_servers=None, kraft_version: int = 0):
        self.node_id = node_id
        self.kraft_version = kraft_version      # 1: dynamic voters (KIP-853)
        # Where an observer (a broker) that knows no leader sends its Fetch to find one
        # (controller.quorum.bootstrap.servers, else the voters).
        self.cluster_id = cluster_id
        self.config = config
        self.rng = rng or random.Random()
        self.log = _Log(log)
        if self.log.base_voters is None:
            self.log.base_voters = frozenset(voters)
        self.bootstrap_servers = tuple(bootstrap_servers if bootstrap_servers is not None else sorted(voters))
        self._bootstrap_index = 0
        qs = quorum_state or QuorumStateData()
        self.epoch = max(qs.leader_epoch, 0)
        self.leader_id = qs.leader_id
        self.voted_id = qs.voted_id
        self._persisted = qs
        # The high watermark is volatile (KIP-595): after a restart it is unknown, except that a
        # snapshot's end offset is committed.
        self.high_watermark: int | None = self.log.snapshot.end_offset if self.log.snapshot else None
        self.state = RaftState.UNATTACHED
        self.v = _Volatile()
        self._inflight: dict[int, _Inflight] = {}
        self._next_correlation = 1
        self._out: list = []
        self._allowed: frozenset | None = None
        self._now = 0

    # ---- the driver's calls ----

    def start(self, now: int) -> list:
        """Enter the state the persisted quorum state says (Kafka's rules on start-up)."""
        self._now = now
        if self.leader_id == self.node_id:
            self._enter(RaftState.RESIGNED)
        elif self.leader_id != NO_ID:
            self._enter(RaftState.FOLLOWER)
        else:
            self._enter(RaftState.UNATTACHED)
        return self._finish()

    def handle(self, event, now: int) -> list:
        self._now = max(self._now, now)
        if isinstance(event, Received):
            self._received(event)
        elif isinstance(event, RequestFailed):
            self._request_failed(event)
        elif isinstance(event, TimerExpired):
            self._timers()
        elif isinstance(event, Append):
            self._dispatch(Ev.APPEND, event)
        elif isinstance(event, SnapshotTaken):
            self._dispatch(Ev.SNAPSHOT_TAKEN, event)
        elif isinstance(event, Resign):
            self._dispatch(Ev.RESIGN, event)
        elif isinstance(event, SnapshotLoaded):
            self._dispatch(Ev.SNAPSHOT_LOADED, event)
        else:
            raise TypeError(f"not a Raft event: {event!r}")
        return self._finish()

    @property
    def leader(self) -> LeaderIdAndEpoch:
        return LeaderIdAndEpoch(self.leader_id, self.epoch)

    @property
    def voters(self) -> frozenset:
        """The voter set: the last VotersRecord in the log, committed or not (KIP-853), else the
        one at the log start."""
        return self.log.voters()

    def is_voter(self) -> bool:
        return self.node_id in self.voters

    def _may_stand(self) -> bool:
        """A replica stands for election when it is in its latest voter set, or in the one before
        a VotersRecord not known to be committed: until that change commits it may still be
        needed (a leader that removed itself and lost its epoch first has the longest log)."""
        if self.node_id in self.voters:
            return True
        sets = self.log.voter_sets
        if sets and (self.high_watermark is None or sets[-1][0] >= self.high_watermark):
            before = sets[-2][1] if len(sets) > 1 else self.log.base_voters
            return self.node_id in before
        return False

    def describe_quorum(self) -> dict:
        """The partition of a DescribeQuorum answer (v1 fields, the codec's names): the leader's
        view of every voter and observer; NOT_LEADER_OR_FOLLOWER anywhere else, as Kafka answers."""
        if self.state != RaftState.LEADER:
            return {"partition_index": 0, "error_code": E_NOT_LEADER_OR_FOLLOWER, "leader_id": self.leader_id,
                    "leader_epoch": self.epoch, "high_watermark": -1, "current_voters": [], "observers": []}

        def row(rid: int, r: _Voter) -> dict:
            return {"replica_id": rid, "log_end_offset": r.end_offset, "last_fetch_timestamp": r.last_fetch_ms,
                    "last_caught_up_timestamp": r.last_caught_up_ms}
        me = row(self.node_id, _Voter(self.log.end, self._now, self._now))
        return {"partition_index": 0, "error_code": 0, "leader_id": self.node_id, "leader_epoch": self.epoch,
                "high_watermark": self._hw_wire(),
                "current_voters": [me] + [row(r, v) for r, v in sorted(self.v.voters.items())],
                "observers": [row(r, v) for r, v in sorted(self.v.observers.items())]}

    # ---- dispatch ----

    def _dispatch(self, kind: Ev, arg=None) -> None:
        t = TRANSITIONS.get((self.state, kind))
        if t is None:
            raise RaftInvariantError(f"no transition for {kind.value} in {self.state.value}")
        before, self._allowed = self._allowed, t.to
        try:
            t.handler(self, arg)
        finally:
            self._allowed = before

    def _transition(self, to: RaftState) -> None:
        if self._allowed is None or to not in self._allowed:
            raise RaftInvariantError(f"{self.state.value} may not become {to.value} here")
        self._enter(to)

    def _enter(self, to: RaftState) -> None:
        was_leader = self.state == RaftState.LEADER
        if was_leader:
            for rid, p in list(self.v.parked.items()):
                self._answer_fetch_error(rid, p.correlation_id, E_NOT_LEADER_OR_FOLLOWER)
            if self.v.pending_change is not None:
                _, source, cid, kind = self.v.pending_change
                self._emit(Send(source, kind(E_NOT_LEADER_OR_FOLLOWER), cid))
        old_leader = (self.leader_id, self.epoch)
        old_voters = self.v.voters
        self.state = to
        self.v = _Volatile()
        self._inflight.clear()
        now = self._now
        if to == RaftState.UNATTACHED:
            self.v.election_deadline = now + self._election_timeout() if self._may_stand() else None
            if self.voters == {self.node_id}:
                self.v.election_deadline = now
        elif to == RaftState.PROSPECTIVE:
            self.v.election_deadline = now + self._election_timeout()
            self.v.granted = {self.node_id}
        elif to == RaftState.CANDIDATE:
            self.v.election_deadline = now + self._election_timeout()
            self.v.granted = {self.node_id}
        elif to == RaftState.FOLLOWER:
            self.v.fetch_deadline = now + self.config.fetch_timeout_ms
        elif to == RaftState.LEADER:
            self.v.voters = {r: _Voter() for r in self.voters if r != self.node_id}
            self.v.check_quorum_deadline = now + self.config.fetch_timeout_ms * 3 // 2
        elif to == RaftState.RESIGNED:
            self.v.election_deadline = now + self._election_timeout()
            self.v.granted = set()   # voters that acknowledged EndQuorumEpoch
            # the followers that have the most of the log first (KIP-595 PreferredCandidates)
            self.v.preferred = tuple(sorted(old_voters, key=lambda r: (-old_voters[r].end_offset, r)))
        self._persist()
        if (self.leader_id, self.epoch) != old_leader or to == RaftState.LEADER:
            self._emit(LeaderChanged(self.leader))

    def _election_timeout(self) -> int:
        t = self.config.election_timeout_ms
        return t + self.rng.randrange(t)

    def _persist(self) -> None:
        qs = QuorumStateData(leader_id=self.leader_id, leader_epoch=self.epoch, voted_id=self.voted_id)
        if qs != self._persisted:
            self._persisted = qs
            self._emit(PersistQuorumState(qs))

    def _emit(self, output) -> None:
        self._out.append(output)

    def _finish(self) -> list:
        self._poll()
        deadline = self._next_deadline()
        if deadline is not None:
            self._emit(SetTimer(deadline))
        out, self._out = self._out, []
        return out

    # ---- moving to a new epoch ----

    def _become_unattached(self, epoch: int) -> None:
        self.epoch, self.leader_id, self.voted_id = epoch, NO_ID, NO_ID
        self._transition(RaftState.UNATTACHED)

    def _become_follower(self, leader_id: int, epoch: int) -> None:
        keep_vote = epoch == self.epoch
        self.epoch, self.leader_id = epoch, leader_id
        if not keep_vote:
            self.voted_id = NO_ID
        self._transition(RaftState.FOLLOWER)

    def _on_higher_epoch(self, leader: LeaderIdAndEpoch) -> None:
        """HIGHER_EPOCH: any state follows a newer epoch's leader, or waits unattached in it."""
        if leader.leader_id not in (NO_ID, self.node_id):
            self._become_follower(leader.leader_id, leader.leader_epoch)
        else:
            self._become_unattached(leader.leader_epoch)

    def _observe(self, leader_id: int, epoch: int) -> None:
        """Before handling a message: a newer epoch moves this replica there first; a known
        leader of the current epoch is followed when this replica did not know it."""
        if epoch > self.epoch:
            self._dispatch(Ev.HIGHER_EPOCH, LeaderIdAndEpoch(leader_id, epoch))
        elif (epoch == self.epoch and leader_id not in (NO_ID, self.node_id)
              and self.leader_id in (NO_ID, leader_id)
              and self.state in (RaftState.UNATTACHED, RaftState.PROSPECTIVE, RaftState.CANDIDATE)):
            self._dispatch(Ev.HIGHER_EPOCH, LeaderIdAndEpoch(leader_id, epoch))

    # ---- received messages ----

    def _received(self, ev: Received) -> None:
        msg = ev.message
        kind = _MESSAGE_EVENTS.get(type(msg))
        if kind is None:
            raise TypeError(f"not a Raft message: {msg!r}")
        if kind.value.endswith("Response"):
            inflight = self._inflight.get(ev.source)
            if inflight is None or inflight.correlation_id != ev.correlation_id or inflight.kind is not type(msg):
                return   # late, duplicated or from a previous state: dropped, as a response to no request
            del self._inflight[ev.source]
            if msg.error_code:
                self.v.next_send[ev.source] = self._now + self.config.retry_backoff_ms
            self._response_epoch(ev.source, msg)
            if self.state in _STATES_FOR_RESPONSE[type(msg)]:
                self._dispatch(kind, ev)
            return
        cid = getattr(msg, "cluster_id", None)
        if cid is not None and self.cluster_id is not None and cid != self.cluster_id:
            self._answer(ev, _error_response(msg, E_INCONSISTENT_CLUSTER_ID, self.leader))
            return
        self._dispatch(kind, ev)

    def _request_failed(self, ev: RequestFailed) -> None:
        """A request that will get no answer: its destination may be asked again after the backoff."""
        inflight = self._inflight.get(ev.destination)
        if inflight is not None and inflight.correlation_id == ev.correlation_id:
            del self._inflight[ev.destination]
            self.v.next_send[ev.destination] = self._now + self.config.retry_backoff_ms

    def _response_epoch(self, source: int, msg) -> None:
        if isinstance(msg, (FetchResponse, FetchSnapshotResponse)):
            leader = msg.current_leader
        else:
            leader = LeaderIdAndEpoch(msg.leader_id, msg.leader_epoch)
        if isinstance(msg, VoteResponse) and msg.vote_granted and (
                leader.leader_epoch == self.epoch or self._pre_vote_epoch(leader)):
            return   # a voter that grants has not heard that leader lately: not news of it
        if leader.leader_epoch >= 0:
            self._observe(leader.leader_id, leader.leader_epoch)

    def _answer(self, ev: Received, message) -> None:
        self._emit(Send(ev.source, message, ev.correlation_id))

    def _send(self, destination: int, message) -> None:
        cid = self._next_correlation
        self._next_correlation += 1
        deadline = self._now + self.config.request_timeout_ms
        self._inflight[destination] = _Inflight(cid, _RESPONSE_OF[type(message)], deadline)
        self._emit(Send(destination, message, cid))

    # Vote

    def _on_vote_request(self, ev: Received) -> None:
        req: VoteRequest = ev.message
        if not req.pre_vote and req.last_offset_epoch > req.replica_epoch:
            self._answer(ev, VoteResponse(E_INVALID_REQUEST, self.leader_id, self.epoch, False))
            return
        if req.replica_epoch < self.epoch:
            self._answer(ev, VoteResponse(E_FENCED_LEADER_EPOCH, self.leader_id, self.epoch, False))
            return
        if not req.pre_vote and req.replica_epoch > self.epoch:
            self._dispatch(Ev.HIGHER_EPOCH, LeaderIdAndEpoch(NO_ID, req.replica_epoch))
            # the new state (Unattached) decides below
        up_to_date = self._log_up_to_date(req.last_offset_epoch, req.last_offset)
        granted = False
        # (KIP-853: a candidate outside this replica's voter set may be a voter it has not heard of yet)
        if req.replica_id != self.node_id and up_to_date:
            state = self.state
            if req.pre_vote:
                if state == RaftState.FOLLOWER:
                    granted = not self.v.fetched_from_leader
                else:
                    granted = state != RaftState.LEADER
            elif state in (RaftState.UNATTACHED, RaftState.PROSPECTIVE) and self._may_vote_for(req.replica_id):
                if self.voted_id != req.replica_id:
                    self.voted_id = req.replica_id
                    self._persist()
                    if state == RaftState.UNATTACHED:
                        self.v.election_deadline = self._now + self._election_timeout()
                granted = True
        self._answer(ev, VoteResponse(0, self.leader_id, self.epoch, granted))

    def _may_vote_for(self, candidate: int) -> bool:
        """One vote per epoch: none given yet (and no leader known in it), or to this candidate."""
        return self.voted_id == candidate or (self.voted_id == NO_ID and self.leader_id == NO_ID)

    def _log_up_to_date(self, last_epoch: int, end_offset: int) -> bool:
        """A candidate's log is at least as up to date as this one: its last epoch is newer, or
        the same with an end offset at least as far."""
        return (last_epoch, end_offset) >= (self.log.last_epoch(), self.log.end)

    def _on_vote_response(self, ev: Received) -> None:
        resp: VoteResponse = ev.message
        if resp.error_code:
            return
        # A candidate counts votes of its own epoch (a voter moves to it before answering); a
        # prospective also counts pre-votes from voters still in an older epoch.
        if resp.leader_epoch != self.epoch and (self.state == RaftState.CANDIDATE or resp.leader_epoch > self.epoch) \
                and not (resp.vote_granted and self._pre_vote_epoch(LeaderIdAndEpoch(resp.leader_id, resp.leader_epoch))):
            return
        (self.v.granted if resp.vote_granted else self.v.rejected).add(ev.source)
        if self.state == RaftState.PROSPECTIVE:
            self._maybe_candidate()
        else:
            self._maybe_leader()

    def _pre_vote_epoch(self, leader: LeaderIdAndEpoch) -> bool:
        """A pre-vote granted by a voter that moved to the epoch asked about (this one's + 1, no
        leader), as Apache Kafka 4.4's voters do: a grant, not news of a newer epoch."""
        return (self.state == RaftState.PROSPECTIVE and leader.leader_epoch == self.epoch + 1
                and leader.leader_id == NO_ID)

    def _maybe_candidate(self) -> None:
        if self._majority(self.v.granted):
            self.epoch, self.leader_id, self.voted_id = self.epoch + 1, NO_ID, self.node_id
            self._transition(RaftState.CANDIDATE)
            self._maybe_leader()

    def _maybe_leader(self) -> None:
        if self.state == RaftState.CANDIDATE and self._majority(self.v.granted):
            self.leader_id = self.node_id
            self._transition(RaftState.LEADER)
            self.v.epoch_start_offset = base = self.log.end
            if self.kraft_version >= 1 and not self.log.voter_sets and self.log.snapshot is None:
                # The first leader of a dynamic quorum: the formatted voter set goes into the log
                # beside its LeaderChange (KRaftVersion and VotersRecord, as Kafka's leader
                # writes them), so that replicas that were not formatted with it learn it.
                self._append_local(Batch(base, base + 2, self.epoch, control=True, voters=self.voters,
                                         data=("LeaderChange", self.node_id, tuple(sorted(self.voters)))))
            else:
                self._append_local(Batch(base, base, self.epoch, data=("LeaderChange", self.node_id), control=True))

    def _majority(self, ids) -> bool:
        return len(ids & self.voters) * 2 > len(self.voters)

    # BeginQuorumEpoch / EndQuorumEpoch

    def _on_begin_epoch_request(self, ev: Received) -> None:
        req: BeginQuorumEpochRequest = ev.message
        if req.leader_epoch < self.epoch:
            self._answer(ev, BeginQuorumEpochResponse(E_FENCED_LEADER_EPOCH, self.leader_id, self.epoch))
            return
        if req.leader_id == self.node_id or req.leader_id not in self.voters:
            self._answer(ev, BeginQuorumEpochResponse(E_INVALID_REQUEST, self.leader_id, self.epoch))
            return
        if self.leader_id not in (NO_ID, req.leader_id) and req.leader_epoch == self.epoch:
            raise RaftInvariantError(f"two leaders in epoch {self.epoch}: {self.leader_id} and {req.leader_id}")
        self._observe(req.leader_id, req.leader_epoch)
        self._answer(ev, BeginQuorumEpochResponse(0, self.leader_id, self.epoch))

    def _on_begin_epoch_response(self, ev: Received) -> None:
        resp: BeginQuorumEpochResponse = ev.message
        voter = self.v.voters.get(ev.source)
        if voter is not None and resp.error_code == 0 and resp.leader_epoch == self.epoch:
            voter.acked = True

    def _on_end_epoch_request(self, ev: Received) -> None:
        req: EndQuorumEpochRequest = ev.message
        if req.leader_epoch < self.epoch:
            self._answer(ev, EndQuorumEpochResponse(E_FENCED_LEADER_EPOCH, self.leader_id, self.epoch))
            return
        if req.leader_epoch > self.epoch:
            self._dispatch(Ev.HIGHER_EPOCH, LeaderIdAndEpoch(req.leader_id, req.leader_epoch))
        if self.state == RaftState.FOLLOWER and self.leader_id == req.leader_id:
            # The leader is going: elect sooner, the preferred candidates first (KIP-595).
            cands = list(req.preferred_candidates)
            position = cands.index(self.node_id) if self.node_id in cands else len(cands)
            backoff = min(self.config.election_backoff_max_ms,
                          self.config.retry_backoff_ms * (1 << min(position, 16))) if position else 0
            self.v.fetch_deadline = min(self.v.fetch_deadline, self._now + backoff)
            self.v.fetched_from_leader = False
        self._answer(ev, EndQuorumEpochResponse(0, self.leader_id, self.epoch))

    def _on_end_epoch_response(self, ev: Received) -> None:
        if ev.message.error_code == 0:
            self.v.granted.add(ev.source)

    # Fetch, on the leader

    def _on_fetch_request(self, ev: Received) -> None:
        req: FetchRequest = ev.message
        if self.state != RaftState.LEADER:
            code = E_FENCED_LEADER_EPOCH if req.current_leader_epoch < self.epoch else (
                E_UNKNOWN_LEADER_EPOCH if req.current_leader_epoch > self.epoch else E_NOT_LEADER_OR_FOLLOWER)
            self._answer(ev, self._fetch_error(code))
            return
        if req.current_leader_epoch < self.epoch:
            self._answer(ev, self._fetch_error(E_FENCED_LEADER_EPOCH))
            return
        if req.current_leader_epoch > self.epoch:
            self._answer(ev, self._fetch_error(E_UNKNOWN_LEADER_EPOCH))
            return
        if req.fetch_offset < 0 or req.last_fetched_epoch > self.epoch:
            self._answer(ev, self._fetch_error(E_INVALID_REQUEST))
            return
        found = self.log.validate(req.fetch_offset, req.last_fetched_epoch)
        if isinstance(found, SnapshotId):
            self._answer(ev, FetchResponse(0, self._hw_wire(), self.log.start, self.leader, snapshot_id=found))
            return
        if isinstance(found, EpochEndOffset):
            self._answer(ev, FetchResponse(0, self._hw_wire(), self.log.start, self.leader, diverging_epoch=found))
            return
        voter = self.v.voters.get(req.replica_id)
        replica = voter if voter is not None else (
            self.v.observers.setdefault(req.replica_id, _Voter()) if req.replica_id >= 0 else _Voter())
        replica.end_offset = max(replica.end_offset, req.fetch_offset)
        replica.last_fetch_ms = self._now
        if req.fetch_offset >= self.log.end:
            replica.last_caught_up_ms = self._now
        if voter is not None:
            voter.acked = True
            self._update_high_watermark()
        self.v.parked.pop(req.replica_id, None)   # a newer fetch replaces one its sender gave up on
        hw = self._hw_wire()
        # Parked at the log end unless the fetcher is behind the high watermark; one that does
        # not tell its own (Fetch before v18: NO_HW, max int64, as in Kafka) waits like one that
        # knows it: a moving high watermark wakes the parked fetches anyway.
        if req.fetch_offset >= self.log.end and req.max_wait_ms > 0 and (hw < 0 or req.high_watermark >= hw):
            self.v.parked[req.replica_id] = _Parked(ev.correlation_id, req, self._now + req.max_wait_ms)
            return
        self._answer(ev, self._fetch_answer(req))

    def _fetch_answer(self, req: FetchRequest) -> FetchResponse:
        records = RecordsRange(req.fetch_offset, self.log.end) if req.fetch_offset < self.log.end else ()
        return FetchResponse(0, self._hw_wire(), self.log.start, self.leader, records=records)

    def _fetch_error(self, code: int) -> FetchResponse:
        return FetchResponse(code, -1, self.log.start, self.leader)

    def _answer_fetch_error(self, replica_id: int, correlation_id: int, code: int) -> None:
        self._emit(Send(replica_id, self._fetch_error(code), correlation_id))

    def _hw_wire(self) -> int:
        """The high watermark a leader tells: unknown (-1) until an offset of its own epoch is
        committed, since what it knew before may be behind what its followers know."""
        if self.high_watermark is None or self.high_watermark <= self.v.epoch_start_offset:
            return -1
        return self.high_watermark

    def _wake_parked(self, expired_only: bool = False) -> None:
        for rid, p in list(self.v.parked.items()):
            if expired_only and p.deadline > self._now:
                continue
            del self.v.parked[rid]
            self._emit(Send(rid, self._fetch_answer(p.request), p.correlation_id))

    def _update_high_watermark(self) -> None:
        voters = self.voters
        offsets = sorted((self.log.end if r == self.node_id else self.v.voters[r].end_offset for r in voters),
                         reverse=True)
        majority_offset = offsets[len(voters) // 2]
        if majority_offset > self.v.epoch_start_offset and (self.high_watermark is None
                                                            or majority_offset > self.high_watermark):
            self._set_high_watermark(majority_offset)
            self._wake_parked()
            self._maybe_complete_voter_change()

    def _set_high_watermark(self, hw: int) -> None:
        if self.high_watermark is not None and hw < self.high_watermark:
            raise RaftInvariantError(f"high watermark going back from {self.high_watermark} to {hw}")
        if hw != self.high_watermark:
            self.high_watermark = hw
            self._emit(Committed(hw))

    def _append_local(self, batch: Batch) -> None:
        self.log.append(batch)
        self._emit(AppendToLog((batch,)))
        if batch.voters is not None:
            for r in self.voters:
                if r != self.node_id and r not in self.v.voters:
                    self.v.voters[r] = self.v.observers.pop(r, None) or _Voter()
            for r in list(self.v.voters):
                if r not in self.voters:
                    self.v.observers[r] = self.v.voters.pop(r)
        self._update_high_watermark()
        self._wake_parked()

    def _on_append(self, ev: Append) -> None:
        if ev.count < 1:
            raise ValueError("append of no records")
        base = self.log.end
        self._append_local(Batch(base, base + ev.count - 1, self.epoch, ev.data))
        self._emit(Appended(base, base + ev.count - 1, self.epoch))

    def _refuse_append(self, ev: Append) -> None:
        self._emit(AppendRefused(E_NOT_LEADER_OR_FOLLOWER, self.leader))

    # Fetch, on the follower

    def _on_fetch_response(self, ev: Received) -> None:
        resp: FetchResponse = ev.message
        if resp.current_leader.leader_epoch != self.epoch or ev.source != self.leader_id:
            return
        if resp.error_code:
            self.v.next_send[ev.source] = self._now + self.config.retry_backoff_ms
            return
        self.v.fetch_deadline = self._now + self.config.fetch_timeout_ms
        self.v.fetched_from_leader = True
        if resp.diverging_epoch is not None:
            # Where this log's largest epoch not above the leader's ends; if that is the leader's
            # epoch too, no further than the leader's end of it (batches never split: both ends
            # are where an epoch's batches end).
            mine = self.log.end_offset_for_epoch(resp.diverging_epoch.epoch)
            to = mine.end_offset
            if mine.epoch == resp.diverging_epoch.epoch:
                to = min(to, resp.diverging_epoch.end_offset)
            if self.high_watermark is not None and to < self.high_watermark:
                raise RaftInvariantError(f"truncation to {to} below the high watermark {self.high_watermark}")
            if to < self.log.end:
                self.log.truncate(to)
                self._emit(TruncateTo(to))
            return
        if resp.snapshot_id is not None:
            self.v.snapshot_fetch = (resp.snapshot_id, 0)
            return
        batches = resp.records if isinstance(resp.records, tuple) else ()
        if batches and batches[0].base_offset != self.log.end:
            return   # not where this follower's log ends: drop, fetch again
        for b in batches:
            self.log.append(b)
        if batches:
            self._emit(AppendToLog(tuple(batches)))
        if resp.high_watermark >= 0:
            hw = min(resp.high_watermark, self.log.end)
            if self.high_watermark is None or hw > self.high_watermark:
                self._set_high_watermark(hw)

    def _on_fetch_snapshot_request(self, ev: Received) -> None:
        req: FetchSnapshotRequest = ev.message
        if self.state != RaftState.LEADER or req.current_leader_epoch != self.epoch:
            code = (E_FENCED_LEADER_EPOCH if req.current_leader_epoch < self.epoch else
                    E_UNKNOWN_LEADER_EPOCH if req.current_leader_epoch > self.epoch else E_NOT_LEADER_OR_FOLLOWER)
            self._answer(ev, FetchSnapshotResponse(code, self.leader))
            return
        snap = self.log.snapshot
        if snap is None or req.snapshot_id != snap:
            self._answer(ev, FetchSnapshotResponse(E_SNAPSHOT_NOT_FOUND, self.leader, req.snapshot_id))
            return
        if not 0 <= req.position < self.log.snapshot_size:
            self._answer(ev, FetchSnapshotResponse(E_POSITION_OUT_OF_RANGE, self.leader, snap))
            return
        voter = self.v.voters.get(req.replica_id)
        if voter is not None:
            voter.last_fetch_ms = self._now
            voter.acked = True
        n = min(req.max_bytes, self.log.snapshot_size - req.position)
        self._answer(ev, FetchSnapshotResponse(0, self.leader, snap, self.log.snapshot_size, req.position,
                                               SnapshotChunk(snap, req.position, n)))

    def _on_fetch_snapshot_response(self, ev: Received) -> None:
        resp: FetchSnapshotResponse = ev.message
        if (resp.current_leader.leader_epoch != self.epoch or ev.source != self.leader_id
                or self.v.snapshot_fetch is None):
            return
        snap, position = self.v.snapshot_fetch
        if resp.error_code:
            self.v.snapshot_fetch = None   # SNAPSHOT_NOT_FOUND etc.: fetch again, which names the newest
            self.v.next_send[ev.source] = self._now + self.config.retry_backoff_ms
            return
        if resp.snapshot_id != snap or resp.position != position or not isinstance(resp.unaligned_records, bytes):
            return
        self.v.fetch_deadline = self._now + self.config.fetch_timeout_ms
        data = resp.unaligned_records
        self._emit(WriteSnapshotChunk(snap, position, data))
        position += len(data)
        if position < resp.size:
            self.v.snapshot_fetch = (snap, position)
            return
        self.v.snapshot_fetch = None
        if self.high_watermark is not None and snap.end_offset < self.high_watermark:
            raise RaftInvariantError(f"snapshot {snap} below the high watermark {self.high_watermark}")
        self.log.reset_to_snapshot(snap, resp.size)
        self.v.loading_snapshot = True
        self._emit(InstallSnapshot(snap))
        if self.high_watermark is None or snap.end_offset > self.high_watermark:
            self._set_high_watermark(snap.end_offset)

    def _on_snapshot_loaded(self, ev: SnapshotLoaded) -> None:
        if self.log.snapshot == ev.snapshot_id and not self.log.voter_sets:
            self.log.base_voters = frozenset(ev.voters)
        self.v.loading_snapshot = False

    # AddRaftVoter / RemoveRaftVoter (KIP-853), on the leader

    def _on_voter_change(self, ev: Received) -> None:
        req = ev.message
        kind = _VOTER_CHANGE_RESPONSE[type(req)]

        def refuse(code: int, why: str) -> None:
            self._answer(ev, kind(code) if kind is UpdateRaftVoterResponse else kind(code, why))
        hw = self.high_watermark
        committed = hw is not None and hw > self.v.epoch_start_offset
        if kind is UpdateRaftVoterResponse:
            if req.current_leader_epoch != self.epoch:
                return refuse(E_FENCED_LEADER_EPOCH if req.current_leader_epoch < self.epoch
                              else E_UNKNOWN_LEADER_EPOCH, f"leader epoch {req.current_leader_epoch}, not {self.epoch}")
            if not committed:
                return refuse(E_REQUEST_TIMED_OUT, "the leader has not committed an offset of its epoch yet")
            if self.kraft_version < 1:   # static voters: nothing to write (Kafka keeps it in memory)
                return refuse(0 if req.voter_id in self.voters else E_VOTER_NOT_FOUND, "")
        if self.kraft_version < 1:
            return refuse(E_UNSUPPORTED_VERSION, "kraft.version 0: the voter set is static")
        if not committed:
            return refuse(E_REQUEST_TIMED_OUT, "the leader has not committed an offset of its epoch yet")
        if self._voter_change_pending():
            return refuse(E_REQUEST_TIMED_OUT, "a change of the voter set is not committed yet")
        voters = self.voters
        if kind is AddRaftVoterResponse:
            if req.voter_id in voters:
                return refuse(E_DUPLICATE_VOTER, f"{req.voter_id} is a voter already")
            obs = self.v.observers.get(req.voter_id)
            if (obs is None or obs.end_offset < hw
                    or obs.last_fetch_ms < self._now - self.config.fetch_timeout_ms):
                return refuse(E_REQUEST_TIMED_OUT, f"{req.voter_id} is not a caught-up observer")
            new = voters | {req.voter_id}
        elif kind is UpdateRaftVoterResponse:
            if req.voter_id not in voters:
                return refuse(E_VOTER_NOT_FOUND, f"{req.voter_id} is not a voter")
            new = voters     # the same set; the I/O layer writes the voter's new endpoints in its VotersRecord
        else:
            if req.voter_id not in voters:
                return refuse(E_VOTER_NOT_FOUND, f"{req.voter_id} is not a voter")
            if len(voters) == 1:
                return refuse(E_INVALID_REQUEST, "the last voter cannot be removed")
            new = voters - {req.voter_id}
        offset = self.log.end
        if kind is not UpdateRaftVoterResponse:   # answered once committed; an update at once (as Kafka's)
            self.v.pending_change = (offset, ev.source, ev.correlation_id, kind)
        self._append_local(Batch(offset, offset, self.epoch, data=("Voters", tuple(sorted(new))), control=True,
                                 voters=frozenset(new)))
        if kind is UpdateRaftVoterResponse:
            self._answer(ev, kind(0))

    def _voter_change_pending(self) -> bool:
        """One voter change at a time: the last VotersRecord must be committed (KIP-853)."""
        return self.v.pending_change is not None or self.log.last_voters_offset() >= self.high_watermark

    def _maybe_complete_voter_change(self) -> None:
        pending = self.v.pending_change
        if pending is not None and self.high_watermark is not None and self.high_watermark > pending[0]:
            self.v.pending_change = None
            offset, source, cid, kind = pending
            self._emit(Send(source, kind(0), cid))
            if self.node_id not in self.voters:
                self.v.check_quorum_deadline = self._now    # resign (check quorum does it)

    def _refuse_voter_change(self, ev: Received) -> None:
        self._answer(ev, _error_response(ev.message, E_NOT_LEADER_OR_FOLLOWER, self.leader))

    def _snapshot_taken(self, ev: SnapshotTaken) -> None:
        snap = ev.snapshot_id
        if self.high_watermark is None or snap.end_offset > self.high_watermark or snap.end_offset > self.log.end:
            raise RaftInvariantError(f"snapshot {snap} of uncommitted offsets (high watermark {self.high_watermark})")
        if snap.end_offset <= self.log.start:
            return
        expected = self.log.end_offset_for_epoch(snap.epoch)
        if expected.epoch != snap.epoch:
            raise RaftInvariantError(f"snapshot {snap} names an epoch the log does not have at that offset")
        self.log.drop_before(snap, ev.size)
        self._emit(DeleteLogBefore(snap.end_offset))

    # ---- timers ----

    def _timers(self) -> None:
        now = self._now
        for dest, f in list(self._inflight.items()):
            if f.deadline <= now:
                del self._inflight[dest]
                self.v.next_send[dest] = now + self.config.retry_backoff_ms
        v = self.v
        if v.parked:
            self._wake_parked(expired_only=True)
        if v.check_quorum_deadline is not None and v.check_quorum_deadline <= now:
            self._dispatch(Ev.CHECK_QUORUM_TIMEOUT)
        elif v.fetch_deadline is not None and v.fetch_deadline <= now:
            self._dispatch(Ev.FETCH_TIMEOUT)
        elif v.election_deadline is not None and v.election_deadline <= now:
            self._dispatch(Ev.ELECTION_TIMEOUT)

    def _next_deadline(self) -> int | None:
        v = self.v
        times = [t for t in (v.election_deadline, v.fetch_deadline, v.check_quorum_deadline) if t is not None]
        times += [f.deadline for f in self._inflight.values()]
        times += [p.deadline for p in v.parked.values()]
        times += [t for d, t in v.next_send.items() if d not in self._inflight and t > self._now]
        return min(times) if times else None

    def _on_election_timeout(self, _=None) -> None:
        """Unattached, Candidate, Prospective, Resigned: try (again) to be elected, asking for
        pre-votes first; a Prospective that did not get a majority waits, unattached (or following
        the leader it knew)."""
        if self.state == RaftState.PROSPECTIVE:
            if self.leader_id != NO_ID:
                self._transition(RaftState.FOLLOWER)
            else:
                self._transition(RaftState.UNATTACHED)
            return
        if not self._may_stand():
            if self.state == RaftState.RESIGNED:   # it removed itself (KIP-853): an observer now
                self.leader_id = NO_ID
                self._transition(RaftState.UNATTACHED)
            else:
                self.v.election_deadline = None
            return
        if self.state == RaftState.RESIGNED:
            self.leader_id = NO_ID      # its vote (for itself) in this epoch stays
        self._transition(RaftState.PROSPECTIVE)
        self._maybe_candidate()

    def _on_fetch_timeout(self, _=None) -> None:
        if self._may_stand():
            self._transition(RaftState.PROSPECTIVE)
            self._maybe_candidate()
        else:
            self.leader_id = NO_ID
            self._transition(RaftState.UNATTACHED)

    def _on_check_quorum_timeout(self, _=None) -> None:
        timeout = self.config.fetch_timeout_ms * 3 // 2
        if self.v.pending_change is None and self.node_id not in self.voters:
            self._transition(RaftState.RESIGNED)     # it removed itself, and that is committed
            return
        recent = sorted((v.last_fetch_ms for v in self.v.voters.values()), reverse=True)
        # followers needed beside the leader for a majority of the voter set
        needed = len(self.voters) // 2 + 1 - (self.node_id in self.voters)
        if needed == 0:
            self.v.check_quorum_deadline = None
            return
        if len(recent) >= needed and recent[needed - 1] >= 0 and recent[needed - 1] + timeout > self._now:
            self.v.check_quorum_deadline = recent[needed - 1] + timeout
            return
        self._transition(RaftState.RESIGNED)

    def _on_resign(self, _=None) -> None:
        self._transition(RaftState.RESIGNED)

    def _ignore(self, _=None) -> None:
        pass

    # ---- what each state sends when it can (Kafka's poll) ----

    def _poll(self) -> None:
        now, v, st = self._now, self.v, self.state

        def ready(dest: int) -> bool:
            return dest not in self._inflight and v.next_send.get(dest, 0) <= now

        if st in (RaftState.PROSPECTIVE, RaftState.CANDIDATE):
            pre = st == RaftState.PROSPECTIVE
            for r in sorted(self.voters):
                if r != self.node_id and r not in v.granted and r not in v.rejected and ready(r):
                    self._send(r, VoteRequest(self.cluster_id, r, self.epoch + 1 if pre else self.epoch, self.node_id,
                                              self.log.last_epoch(), self.log.end, pre_vote=pre))
                    v.next_send[r] = now + self.config.retry_backoff_ms
        elif st == RaftState.LEADER:
            for r, voter in v.voters.items():
                if not voter.acked and ready(r):
                    self._send(r, BeginQuorumEpochRequest(self.cluster_id, r, self.node_id, self.epoch))
                    v.next_send[r] = now + self.config.retry_backoff_ms
        elif st == RaftState.RESIGNED:
            for r in sorted(self.voters):
                if r != self.node_id and r not in v.granted and ready(r):
                    self._send(r, EndQuorumEpochRequest(self.cluster_id, self.node_id, self.epoch, v.preferred))
                    v.next_send[r] = now + self.config.retry_backoff_ms
        elif (st == RaftState.UNATTACHED and not self._may_stand() and self.leader_id == NO_ID
              and self.bootstrap_servers and not self._inflight):
            # An observer without a leader asks the bootstrap servers in turn; an answer naming
            # the leader (even an error's CurrentLeader) makes it a follower of it.
            dest = self.bootstrap_servers[self._bootstrap_index % len(self.bootstrap_servers)]
            if ready(dest):
                self._bootstrap_index += 1
                self._send(dest, self._fetch_request())
                v.next_send[dest] = now + self.config.retry_backoff_ms
        elif (st == RaftState.FOLLOWER and self.leader_id != NO_ID and ready(self.leader_id)
              and not v.loading_snapshot):
            if v.snapshot_fetch is not None:
                snap, position = v.snapshot_fetch
                self._send(self.leader_id, FetchSnapshotRequest(self.cluster_id, self.node_id, self.epoch, snap,
                                                                position, self.config.snapshot_max_bytes))
            else:
                self._send(self.leader_id, self._fetch_request())
                # Generous: the leader may hold the fetch for its max wait.
                self._inflight[self.leader_id].deadline += self.config.fetch_max_wait_ms

    def _fetch_request(self) -> FetchRequest:
        return FetchRequest(self.cluster_id, self.node_id, self.epoch, self.log.end, self.log.last_epoch(),
                            self.log.start, max_wait_ms=self.config.fetch_max_wait_ms,
                            high_watermark=NO_HW if self.high_watermark is None else self.high_watermark)


def _error_response(msg, code: int, leader: LeaderIdAndEpoch):
    if isinstance(msg, VoteRequest):
        return VoteResponse(code, leader.leader_id, leader.leader_epoch, False)
    if isinstance(msg, BeginQuorumEpochRequest):
        return BeginQuorumEpochResponse(code, leader.leader_id, leader.leader_epoch)
    if isinstance(msg, EndQuorumEpochRequest):
        return EndQuorumEpochResponse(code, leader.leader_id, leader.leader_epoch)
    if isinstance(msg, FetchRequest):
        return FetchResponse(code, -1, -1, leader)
    if isinstance(msg, AddRaftVoterRequest):
        return AddRaftVoterResponse(code)
    if isinstance(msg, RemoveRaftVoterRequest):
        return RemoveRaftVoterResponse(code)
    if isinstance(msg, UpdateRaftVoterRequest):
        return UpdateRaftVoterResponse(code)
    return FetchSnapshotResponse(code, leader)


_VOTER_CHANGE_RESPONSE = {AddRaftVoterRequest: AddRaftVoterResponse, RemoveRaftVoterRequest: RemoveRaftVoterResponse,
                          UpdateRaftVoterRequest: UpdateRaftVoterResponse}
_RESPONSE_OF = {VoteRequest: VoteResponse, BeginQuorumEpochRequest: BeginQuorumEpochResponse,
                EndQuorumEpochRequest: EndQuorumEpochResponse, FetchRequest: FetchResponse,
                FetchSnapshotRequest: FetchSnapshotResponse}

S, E, N = RaftState, Ev, RaftNode
_ALL = frozenset(RaftState)
_STAY = frozenset()
_NEWER = frozenset({S.UNATTACHED, S.FOLLOWER})

#: The one transition table: (state, event) -> the handler and the states it may move to.
#: HIGHER_EPOCH is dispatched before a message's own handling when it carries a newer epoch
#: (or names the leader of the current one to a replica that did not know it).
TRANSITIONS: dict[tuple[RaftState, Ev], Transition] = {}


def _row(states, event: Ev, handler, to=_STAY) -> None:
    for s in states:
        TRANSITIONS[(s, event)] = Transition(handler, frozenset(to))


_row(_ALL, E.HIGHER_EPOCH, N._on_higher_epoch, _NEWER)
_row(_ALL, E.VOTE_REQUEST, N._on_vote_request)
_row([S.PROSPECTIVE], E.VOTE_RESPONSE, N._on_vote_response, {S.CANDIDATE, S.LEADER})
_row([S.CANDIDATE], E.VOTE_RESPONSE, N._on_vote_response, {S.LEADER})
_row(_ALL, E.BEGIN_EPOCH_REQUEST, N._on_begin_epoch_request)
_row([S.LEADER], E.BEGIN_EPOCH_RESPONSE, N._on_begin_epoch_response)
_row(_ALL, E.END_EPOCH_REQUEST, N._on_end_epoch_request)
_row([S.RESIGNED], E.END_EPOCH_RESPONSE, N._on_end_epoch_response)
_row(_ALL, E.FETCH_REQUEST, N._on_fetch_request)
_row([S.FOLLOWER], E.FETCH_RESPONSE, N._on_fetch_response)
_row([S.UNATTACHED], E.FETCH_RESPONSE, N._ignore)   # an observer's bootstrap fetch that found no leader
_row(_ALL, E.FETCH_SNAPSHOT_REQUEST, N._on_fetch_snapshot_request)
_row([S.FOLLOWER], E.FETCH_SNAPSHOT_RESPONSE, N._on_fetch_snapshot_response)
_row([S.UNATTACHED, S.CANDIDATE], E.ELECTION_TIMEOUT, N._on_election_timeout,
     {S.PROSPECTIVE, S.CANDIDATE, S.LEADER})
_row([S.RESIGNED], E.ELECTION_TIMEOUT, N._on_election_timeout, {S.PROSPECTIVE, S.CANDIDATE, S.LEADER, S.UNATTACHED})
_row([S.PROSPECTIVE], E.ELECTION_TIMEOUT, N._on_election_timeout, {S.UNATTACHED, S.FOLLOWER})
_row([S.FOLLOWER], E.FETCH_TIMEOUT, N._on_fetch_timeout, {S.PROSPECTIVE, S.CANDIDATE, S.LEADER, S.UNATTACHED})
_row([S.LEADER], E.CHECK_QUORUM_TIMEOUT, N._on_check_quorum_timeout, {S.RESIGNED})
_row([S.LEADER], E.APPEND, N._on_append)
_row([S.UNATTACHED, S.PROSPECTIVE, S.CANDIDATE, S.FOLLOWER, S.RESIGNED], E.APPEND, N._refuse_append)
_row([S.LEADER], E.RESIGN, N._on_resign, {S.RESIGNED})
_row([S.UNATTACHED, S.PROSPECTIVE, S.CANDIDATE, S.FOLLOWER, S.RESIGNED], E.RESIGN, N._ignore)
_row(_ALL, E.SNAPSHOT_TAKEN, N._snapshot_taken)
_row(_ALL, E.SNAPSHOT_LOADED, N._on_snapshot_loaded)
_row([S.LEADER], E.ADD_VOTER_REQUEST, N._on_voter_change)
_row([S.LEADER], E.REMOVE_VOTER_REQUEST, N._on_voter_change)
_row([S.LEADER], E.UPDATE_VOTER_REQUEST, N._on_voter_change)
_row([S.UNATTACHED, S.PROSPECTIVE, S.CANDIDATE, S.FOLLOWER, S.RESIGNED], E.UPDATE_VOTER_REQUEST,
     N._refuse_voter_change)
_row([S.UNATTACHED, S.PROSPECTIVE, S.CANDIDATE, S.FOLLOWER, S.RESIGNED], E.ADD_VOTER_REQUEST,
     N._refuse_voter_change)
_row([S.UNATTACHED, S.PROSPECTIVE, S.CANDIDATE, S.FOLLOWER, S.RESIGNED], E.REMOVE_VOTER_REQUEST,
     N._refuse_voter_change)

#: The states in which a response of each kind is still handled (others drop it, after its epoch is seen).
_STATES_FOR_RESPONSE = {
    VoteResponse: {S.PROSPECTIVE, S.CANDIDATE},
    BeginQuorumEpochResponse: {S.LEADER},
    EndQuorumEpochResponse: {S.RESIGNED},
    FetchResponse: {S.FOLLOWER, S.UNATTACHED},
    FetchSnapshotResponse: {S.FOLLOWER},
}
del S, E, N
