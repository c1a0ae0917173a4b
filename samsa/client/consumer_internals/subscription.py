"""What the consumer reads: its subscription (topics or a pattern) or manual assignment,
and for each assigned partition its position, pause flag and buffered fetched data.

Two offsets per partition: ``position`` is the next offset poll() hands out; the
fetcher's ``fetch_offset`` runs ahead of it by the records fetched but not yet returned
(prefetching). A seek moves both and bumps ``epoch``, so that a fetch sent before the
seek is recognised and dropped when it comes back.
"""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Iterable

from samsa.client.consumer_internals.records import CompletedFetch
from samsa.client.types import TopicPartition

AUTO_SUBSCRIBED, USER_ASSIGNED = "subscribed", "assigned"


class PartitionState:
    __slots__ = ("position", "leader_epoch", "fetch_offset", "epoch", "paused", "revoking", "reset_strategy",
                 "buffered", "inflight", "high_watermark", "log_start_offset", "last_stable_offset", "error",
                 "retry_at")

    def __init__(self) -> None:
        self.position: int | None = None
        self.leader_epoch: int | None = None
        self.fetch_offset: int | None = None
        self.epoch = 0
        self.paused = False
        self.revoking = False  # a cooperative rebalance is taking it away: no more fetching or polling
        self.reset_strategy: str | None = None  # an offset reset is due: "earliest" / "latest"
        self.buffered: deque[CompletedFetch] = deque()
        self.inflight = False
        self.high_watermark = -1
        self.log_start_offset = -1
        self.last_stable_offset = -1
        self.error: BaseException | None = None  # raised by the next poll
        self.retry_at = 0.0  # loop time before which the partition is not fetched (after an error)

    def seek(self, offset: int, leader_epoch: int | None = None) -> None:
        self.position = self.fetch_offset = offset
        self.leader_epoch = leader_epoch
        self.reset_strategy = None
        self.epoch += 1
        self.buffered.clear()
        self.error = None

    def clear_position(self) -> None:
        self.position = self.fetch_offset = None
        self.epoch += 1
        self.buffered.clear()


class SubscriptionState:
    def __init__(self, default_reset: str):
        self.default_reset = default_reset
        self.mode: str | None = None
        self.topics: set[str] = set()  # what the group subscription asks for (pattern: the topics matched)
        self.pattern: re.Pattern | None = None
        self.listener: Any = None
        self.assignment: dict[TopicPartition, PartitionState] = {}
        self.group_topics: set[str] = set()  # the leader: every member's topics

    # ---------------------------------------------------------------- subscribe / assign

    def subscribe(self, topics: Iterable[str] | None, pattern: re.Pattern | None, listener: Any) -> bool:
        """Set a group subscription; True if what it asks for changed."""
        if self.mode == USER_ASSIGNED:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        self.mode = AUTO_SUBSCRIBED
        self.listener = listener
        self.pattern = pattern
        new = set(topics or ())
        changed = new != self.topics or pattern is not None
        self.topics = new
        return changed

    def match_pattern(self, all_topics: Iterable[str]) -> bool:
        """Pattern subscription: the matching topics become the subscription; True if they changed."""
        if self.pattern is None:
            return False
        matched = {t for t in all_topics if self.pattern.fullmatch(t)}
        if matched == self.topics:
            return False
        self.topics = matched
        return True

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        if self.mode == AUTO_SUBSCRIBED:
            raise IllegalStateError("Subscription to topics, partitions and pattern are mutually exclusive")
        self.mode = USER_ASSIGNED if partitions else None
        self._set_assignment(list(partitions))

    def assign_from_group(self, partitions: Iterable[TopicPartition]) -> None:
        self._set_assignment(list(partitions))

    def _set_assignment(self, partitions: list[TopicPartition]) -> None:
        old = self.assignment
        self.assignment = {tp: old.get(tp) or PartitionState() for tp in partitions}

    def unsubscribe(self) -> None:
        self.mode = None
        self.topics = set()
        self.pattern = None
        self.listener = None
        self.assignment = {}
        self.group_topics = set()

    @property
    def subscribed(self) -> bool:
        return self.mode == AUTO_SUBSCRIBED

    # ---------------------------------------------------------------- state

    def state(self, tp: TopicPartition) -> PartitionState:
        s = self.assignment.get(tp)
        if s is None:
            raise IllegalStateError(f"No current assignment for partition {tp}")
        return s

    def missing_positions(self) -> list[TopicPartition]:
        return [tp for tp, s in self.assignment.items() if s.position is None]

    def all_consumed(self) -> dict[TopicPartition, int]:
        """Positions of the partitions that have one: what a commit without offsets commits."""
        return {tp: s.position for tp, s in self.assignment.items() if s.position is not None}


class IllegalStateError(RuntimeError):
    """The call does not fit the consumer's state (as Java's IllegalStateException)."""
