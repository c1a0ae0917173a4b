"""A transactional id's state at its coordinator, and the transitions Kafka allows.

Empty → Ongoing (AddPartitionsToTxn / AddOffsetsToTxn) → PrepareCommit / PrepareAbort
(EndTxn, or the coordinator aborting a timed-out or fenced transaction; with transactions
version 2 an abort with no transaction open, to bump the epoch) → CompleteCommit /
CompleteAbort once every partition has its marker → Ongoing or Empty again. Dead: the id
expired. PrepareEpochFence: an epoch bump fencing the producer of an open transaction (never
written to the log; the abort that follows is).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from samsa.protocol.txn_records import TxnLogValue


class TxnState(Enum):
    EMPTY = (0, "Empty")
    ONGOING = (1, "Ongoing")
    PREPARE_COMMIT = (2, "PrepareCommit")
    PREPARE_ABORT = (3, "PrepareAbort")
    COMPLETE_COMMIT = (4, "CompleteCommit")
    COMPLETE_ABORT = (5, "CompleteAbort")
    DEAD = (6, "Dead")
    PREPARE_EPOCH_FENCE = (7, "PrepareEpochFence")

    @property
    def id(self) -> int:
        return self.value[0]

    @property
    def display(self) -> str:
        """Kafka's name (DescribeTransactions, ListTransactions)."""
        return self.value[1]

    @classmethod
    def from_id(cls, state_id: int) -> TxnState:
        for s in cls:
            if s.id == state_id:
                return s
        raise ValueError(f"unknown transaction state id {state_id}")

    @classmethod
    def from_name(cls, name: str) -> TxnState | None:
        for s in cls:
            if s.display == name:
                return s
        return None


E, O, PC, PA, CC, CA, D, PF = TxnState  # noqa: E741 (short names for the table)
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    E: frozenset({E, CC, CA}),
    O: frozenset({O, E, CC, CA}),
    PC: frozenset({O}),
    PA: frozenset({O, PF, E, CC, CA}),  # from E, CC, CA: an abort with nothing open (version 2)
    CC: frozenset({PC}),
    CA: frozenset({PA}),
    D: frozenset({E, CA, CC}),
    PF: frozenset({O}),
}
COMPLETE = frozenset({CC, CA})
PREPARING = frozenset({PC, PA})
EXPIRABLE = frozenset({E, CC, CA})


class IllegalTransition(Exception):
    pass


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_epoch: int = -1             # the epoch before the last bump (KIP-360 retries)
    pending: TxnState | None = None           # a transition being written: others must wait
    coordinator_epoch: int = 0
    # Transactions version 2 (KIP-890 part 2): the client's version (2: the epoch is bumped at
    # every EndTxn), the producer id taking over when the epoch is exhausted, the one before.
    client_version: int = 0
    next_producer_id: int = -1
    previous_producer_id: int = -1

    def check_transition(self, to: TxnState) -> None:
        if self.state not in VALID_PREVIOUS[to]:
            raise IllegalTransition(f"transaction {self.transactional_id}: {self.state.display} -> {to.display}")

    def to_log(self, state: TxnState | None = None) -> TxnLogValue:
        parts: dict[str, list[int]] = {}
        for topic, index in self.partitions:
            parts.setdefault(topic, []).append(index)
        s = self.state if state is None else state
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms, s.id, parts,
                           self.last_update_ms, self.start_ms, self.previous_producer_id, self.next_producer_id,
                           self.client_version)

    @classmethod
    def from_log(cls, transactional_id: str, v: TxnLogValue, coordinator_epoch: int) -> TransactionMetadata:
        return cls(transactional_id, v.producer_id, v.producer_epoch, v.timeout_ms, TxnState.from_id(v.status),
                   {(t, p) for t, ps in v.partitions.items() for p in ps}, v.start_ms, v.last_update_ms,
                   coordinator_epoch=coordinator_epoch, client_version=v.client_version,
                   next_producer_id=v.next_producer_id, previous_producer_id=v.previous_producer_id)
