"""A partition this broker hosts: its log, its role (leader or follower), the high watermark.

The high watermark is the offset below which every in-sync replica has the records; only
records below it are served to consumers and acknowledged to acks=all producers. The
leader learns how far each follower has got from the offsets of the follower's fetches,
and moves the high watermark to the lowest log end offset in the ISR. Anything waiting
for a partition to move (a long-poll fetch, a parked acks=all produce) waits on a future
here that the next append or high-watermark change resolves.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from samsa.cluster.metadata import PartitionState
from samsa.protocol.batch import BatchHeader
from samsa.storage.log import AppendInfo, PartitionLog


@dataclass
class FollowerProgress:
    """What the leader knows of one follower, from its fetches."""
    log_end_offset: int = -1  # unknown until the follower's first fetch to this leader
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    leader_end_at_last_fetch: int = 0


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog, state: PartitionState, broker_id: int):
        self.topic = topic
        self.index = index
        self.log = log
        self.state = state
        self.broker_id = broker_id
        self.followers: dict[int, FollowerProgress] = {}
        self._waiters: list[asyncio.Future] = []

    def __repr__(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    # ---------------------------------------------------------------- roles

    def become_leader(self, state: PartitionState, now_ms: int) -> None:
        """Lead from ``state.leader_epoch`` on: the epoch starts at the log end offset."""
        self.state = state
        self.log.set_high_watermark(self.log.high_watermark)
        start_leader_epoch(self.log, state)
        self.followers = {r: FollowerProgress(last_caught_up_ms=now_ms) for r in state.replicas
                          if r != self.broker_id}
        self.maybe_advance_high_watermark()
        self.wake()

    def become_follower(self, state: PartitionState) -> None:
        self.state = state
        self.log.set_high_watermark(self.log.high_watermark)
        self.followers = {}
        self.wake()

    # ---------------------------------------------------------------- leader side

    def append(self, records, batches: list[tuple[int, BatchHeader]], now_ms: int) -> AppendInfo:
        info = self.log.append(records, batches, leader_epoch=self.state.leader_epoch, now_ms=now_ms)
        self.maybe_advance_high_watermark()
        self.wake()  # followers long-polling for the new records
        return info

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, now_ms: int) -> None:
        """A follower fetching from ``fetch_offset`` has every record below it."""
        progress = self.followers.setdefault(replica_id, FollowerProgress(last_caught_up_ms=now_ms))
        leo = self.log.log_end_offset
        if fetch_offset >= leo:
            progress.last_caught_up_ms = now_ms
        elif fetch_offset >= progress.leader_end_at_last_fetch:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = fetch_offset
        progress.last_fetch_ms = now_ms
        progress.leader_end_at_last_fetch = leo
        self.maybe_advance_high_watermark()

    def maybe_advance_high_watermark(self) -> None:
        """HW = the lowest log end offset in the ISR; it never goes back."""
        hw = self.log.log_end_offset
        for r in self.state.isr:
            if r != self.broker_id:
                progress = self.followers.get(r)
                hw = min(hw, progress.log_end_offset if progress else -1)
        if hw > self.log.high_watermark:
            self.log.set_high_watermark(hw)
            self.wake()

    def caught_up(self, replica_id: int) -> bool:
        """May this follower join the ISR? (it has everything below the high watermark of this epoch)"""
        progress = self.followers.get(replica_id)
        if progress is None or progress.log_end_offset < 0:
            return False
        epoch_start = self.log.leader_epochs.entries[-1][1] if self.log.leader_epochs.entries else 0
        return progress.log_end_offset >= max(self.high_watermark, epoch_start)

    def lagging(self, now_ms: int, max_lag_ms: int) -> list[int]:
        """ISR followers that have not caught up to the log end within ``max_lag_ms``."""
        return [r for r in self.state.isr if r != self.broker_id
                and now_ms - self.followers.get(r, FollowerProgress()).last_caught_up_ms > max_lag_ms]

    # ---------------------------------------------------------------- waiting

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def watch(self, fut: asyncio.Future) -> None:
        """Resolve ``fut`` at the next append, high-watermark or role change."""
        self._waiters.append(fut)

    def unwatch(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass


def start_leader_epoch(log: PartitionLog, state: PartitionState) -> None:
    """A leader's epoch starts at its log end offset (written to the leader-epoch checkpoint, so
    it may run on a worker thread before the partition is led: then leading writes nothing)."""
    log.leader_epochs.assign(state.leader_epoch, log.log_end_offset)
