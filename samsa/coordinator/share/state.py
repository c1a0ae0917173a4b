"""The state of one share partition as the share coordinator stores it, and the persister interface.

The fields are those of Kafka's share-state RPCs (Initialize/Read/Write/Delete ShareGroupState,
ReadShareGroupStateSummary) and of the ``ShareSnapshot``/``ShareUpdate`` records of
``__share_group_state``. One share partition is keyed by (group id, topic id, partition).
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Protocol


class DeliveryState(enum.IntEnum):
    """Kafka's record delivery states, with the byte values of ``StateBatch.DeliveryState``.
    Only AVAILABLE, ACKNOWLEDGED and ARCHIVED are persisted: an acquired record is stored as
    available (its lock does not survive a leader change)."""
    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVED = 4


@dataclass(frozen=True)
class StateBatch:
    first_offset: int
    last_offset: int
    delivery_state: DeliveryState
    delivery_count: int


@dataclass(frozen=True)
class ShareKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass
class PartitionState:
    """What Read returns and Write stores. ``start_offset`` -1 means not initialised: the
    leader then starts at ``share.auto.offset.reset``.

    Write merges, as Kafka's share coordinator does: the written batches replace the stored
    ones where their offsets overlap, stored batches below the new ``start_offset`` go, and the
    rest stay; so a leader may write only the batches that changed, or all its in-flight ones.
    The state epoch is set by ``initialize`` only (a write at a higher one is accepted, as in
    Kafka, and does not change it); ``start_offset``/``delivery_complete_count`` -1 in a write
    keep the stored values."""
    state_epoch: int = 0
    leader_epoch: int = -1
    start_offset: int = -1
    delivery_complete_count: int = -1
    batches: list[StateBatch] = field(default_factory=list)


class PersisterError(Exception):
    """A share-state call refused: ``code`` is Kafka's error code (NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE, FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH, GROUP_ID_NOT_FOUND,
    UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST, ...)."""

    def __init__(self, code: int, message: str = ""):
        super().__init__(message or f"error {code}")
        self.code = code


class SharePersister(Protocol):
    """How a share partition's leader reads and writes its state. Every method raises
    :class:`PersisterError` when the coordinator refuses, and is retried by the caller on a
    retriable code. Writes are durable (replicated as ``__share_group_state`` is) before they
    return."""

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None: ...

    async def read(self, key: ShareKey, leader_epoch: int) -> PartitionState: ...

    async def write(self, key: ShareKey, state: PartitionState) -> None: ...

    async def read_summary(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        """State epoch, leader epoch, start offset and delivery-complete count; no batches."""
        ...

    async def delete(self, key: ShareKey) -> None: ...
