"""What goes into and comes out of KRaft's consensus core (``samsa.raft.consensus``): plain data.

Requests and responses are the fields of one partition of Kafka's messages (the metadata
partition ``__cluster_metadata-0``), with Kafka's field names in snake_case as the codec spells
them (``VoteRequest.Topics[].Partitions[].ReplicaEpoch`` -> ``VoteRequest.replica_epoch``); the
I/O layer wraps them in the topic/partition arrays and the header, and maps ``correlation_id``
to the request header's. Record bytes never enter the core: a batch is its offsets and leader
epoch (read from the batch header) and an opaque ``data``, and the core answers a Fetch or a
FetchSnapshot with the range to read (``RecordsRange``, ``SnapshotChunk``), which the I/O layer
fills from the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

NO_ID = -1          # LeaderId / VotedId / ReplicaId when there is none
ZERO_UUID = bytes(16)


@dataclass(frozen=True)
class Batch:
    """A record batch of the metadata log: ``base_offset``..``last_offset`` written in leader epoch
    ``epoch`` (its PartitionLeaderEpoch). ``data`` is opaque to the core; ``control`` marks the
    LeaderChange control batch a new leader writes at the start of its epoch (KIP-595); ``voters``
    marks a VotersRecord control batch (KIP-853), the voter set from its offset on."""
    base_offset: int
    last_offset: int
    epoch: int
    data: Any = None
    control: bool = False
    voters: frozenset | None = None


@dataclass(frozen=True)
class EpochEndOffset:         # FetchResponse DivergingEpoch
    epoch: int
    end_offset: int


@dataclass(frozen=True)
class SnapshotId:             # FetchResponse / FetchSnapshot SnapshotId
    end_offset: int
    epoch: int


@dataclass(frozen=True)
class LeaderIdAndEpoch:       # FetchResponse / FetchSnapshotResponse CurrentLeader
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class RecordsRange:
    """The records a Fetch answer carries: the log's batches from ``start_offset`` to
    ``end_offset`` (exclusive), as much of it as the request's bytes allow; the I/O layer reads them."""
    start_offset: int
    end_offset: int


@dataclass(frozen=True)
class SnapshotChunk:
    """The bytes a FetchSnapshot answer carries: up to ``max_bytes`` of snapshot ``snapshot_id``
    from ``position``; the I/O layer reads them."""
    snapshot_id: SnapshotId
    position: int
    max_bytes: int


# ---- requests and responses (one partition of each) ----

@dataclass(frozen=True)
class VoteRequest:            # API 52, v2
    cluster_id: str | None
    voter_id: int
    replica_epoch: int
    replica_id: int
    last_offset_epoch: int
    last_offset: int
    pre_vote: bool = False


@dataclass(frozen=True)
class VoteResponse:
    error_code: int
    leader_id: int
    leader_epoch: int
    vote_granted: bool


@dataclass(frozen=True)
class BeginQuorumEpochRequest:   # API 53, v1
    cluster_id: str | None
    voter_id: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class BeginQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


@dataclass(frozen=True)
class EndQuorumEpochRequest:     # API 54, v1
    cluster_id: str | None
    leader_id: int
    leader_epoch: int
    preferred_candidates: tuple[int, ...] = ()   # PreferredCandidates[].CandidateId


@dataclass(frozen=True)
class EndQuorumEpochResponse:
    error_code: int
    leader_id: int
    leader_epoch: int


NO_HW = 2**63 - 1   # FetchRequest.high_watermark when the fetcher does not know it, or does not say (before v18)


@dataclass(frozen=True)
class FetchRequest:              # API 1 on the metadata partition (v17; high_watermark is v18's, KIP-1166)
    cluster_id: str | None
    replica_id: int              # ReplicaState.ReplicaId
    current_leader_epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    log_start_offset: int
    max_wait_ms: int = 0
    replica_epoch: int = -1      # ReplicaState.ReplicaEpoch
    high_watermark: int = NO_HW      # the fetcher's high watermark (v18, KIP-1166)


@dataclass(frozen=True)
class FetchResponse:
    error_code: int
    high_watermark: int
    log_start_offset: int
    current_leader: LeaderIdAndEpoch
    diverging_epoch: EpochEndOffset | None = None
    snapshot_id: SnapshotId | None = None
    records: Union[RecordsRange, tuple[Batch, ...]] = ()


@dataclass(frozen=True)
class FetchSnapshotRequest:      # API 59, v1
    cluster_id: str | None
    replica_id: int
    current_leader_epoch: int
    snapshot_id: SnapshotId
    position: int
    max_bytes: int = 2**31 - 1


@dataclass(frozen=True)
class FetchSnapshotResponse:
    error_code: int
    current_leader: LeaderIdAndEpoch
    snapshot_id: SnapshotId | None = None
    size: int = -1
    position: int = -1
    unaligned_records: Union[SnapshotChunk, bytes] = b""


@dataclass(frozen=True)
class AddRaftVoterRequest:       # API 80 (KIP-853)
    cluster_id: str | None
    voter_id: int
    timeout_ms: int = 30_000
    voter_directory_id: bytes = ZERO_UUID
    ack_when_committed: bool = True


@dataclass(frozen=True)
class AddRaftVoterResponse:
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True)
class RemoveRaftVoterRequest:    # API 81 (KIP-853)
    cluster_id: str | None
    voter_id: int
    voter_directory_id: bytes = ZERO_UUID


@dataclass(frozen=True)
class RemoveRaftVoterResponse:
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True)
class UpdateRaftVoterRequest:    # API 82 (KIP-853): a voter's endpoints changed (the I/O layer keeps them)
    cluster_id: str | None
    current_leader_epoch: int
    voter_id: int
    voter_directory_id: bytes = ZERO_UUID


@dataclass(frozen=True)
class UpdateRaftVoterResponse:
    error_code: int


Request = Union[VoteRequest, BeginQuorumEpochRequest, EndQuorumEpochRequest, FetchRequest, FetchSnapshotRequest]
Response = Union[VoteResponse, BeginQuorumEpochResponse, EndQuorumEpochResponse, FetchResponse, FetchSnapshotResponse]


# ---- events: what the driver hands the core ----

@dataclass(frozen=True)
class Received:
    """A request or response from ``source``. A response carries the ``correlation_id`` of the
    request it answers; a request carries the one its answer must echo."""
    source: int
    message: Any
    correlation_id: int


@dataclass(frozen=True)
class RequestFailed:
    """The request sent to ``destination`` with ``correlation_id`` got no answer and never will
    (the connection was refused or broke): it may be retried after the backoff, not only when
    its request timeout passes (as Kafka's client hears of a disconnection at once)."""
    destination: int
    correlation_id: int


@dataclass(frozen=True)
class TimerExpired:
    """The time given by the last ``SetTimer`` (or later) has come."""


@dataclass(frozen=True)
class Append:
    """The state machine's user appends ``count`` records (``data``) on the leader."""
    data: Any
    count: int = 1


@dataclass(frozen=True)
class SnapshotTaken:
    """The user wrote snapshot ``snapshot_id`` (``size`` bytes) of committed state: the log before
    its end offset may go."""
    snapshot_id: SnapshotId
    size: int


@dataclass(frozen=True)
class SnapshotLoaded:
    """Answer to ``InstallSnapshot``: the snapshot is in place, and its VotersRecord says
    ``voters`` (KIP-853). Until then the follower neither fetches nor stands for election."""
    snapshot_id: SnapshotId
    voters: frozenset


@dataclass(frozen=True)
class Resign:
    """The leader steps down (graceful shutdown): EndQuorumEpoch to the voters."""


Event = Union[Received, TimerExpired, Append, SnapshotTaken, SnapshotLoaded, Resign]


# ---- outputs: what the driver does, in the order given ----

@dataclass(frozen=True)
class Send:
    destination: int
    message: Any
    correlation_id: int


@dataclass(frozen=True)
class PersistQuorumState:
    """Write the quorum-state file (durably) before doing the outputs that follow."""
    state: Any   # samsa.raft.quorum_state.QuorumStateData


@dataclass(frozen=True)
class AppendToLog:
    batches: tuple[Batch, ...]


@dataclass(frozen=True)
class TruncateTo:
    """Remove the log from ``offset`` on (a follower's divergent suffix)."""
    offset: int


@dataclass(frozen=True)
class WriteSnapshotChunk:
    snapshot_id: SnapshotId
    position: int
    data: bytes


@dataclass(frozen=True)
class InstallSnapshot:
    """The fetched snapshot is complete: it replaces the whole log, which now starts at its end."""
    snapshot_id: SnapshotId


@dataclass(frozen=True)
class DeleteLogBefore:
    """The log before ``offset`` is covered by a snapshot and may be deleted."""
    offset: int


@dataclass(frozen=True)
class Committed:
    """The high watermark moved: offsets below ``high_watermark`` are committed."""
    high_watermark: int


@dataclass(frozen=True)
class Appended:
    """Answer to ``Append``: the records got ``base_offset``.. in ``epoch`` (committed once the
    high watermark passes them, unless the epoch ends first)."""
    base_offset: int
    last_offset: int
    epoch: int


@dataclass(frozen=True)
class AppendRefused:
    error_code: int
    leader: LeaderIdAndEpoch


@dataclass(frozen=True)
class LeaderChanged:
    leader: LeaderIdAndEpoch


@dataclass(frozen=True)
class SetTimer:
    """Hand the core ``TimerExpired`` at ``deadline_ms`` (replaces any earlier timer)."""
    deadline_ms: int
