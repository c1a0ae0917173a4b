"""The partitions this broker hosts: their logs, leadership, high watermark and waiters.

The high watermark is the offset below which every in-sync replica has the records; only
records below it are served to consumers and acknowledged to acks=all producers. On a
single broker the ISR is the broker itself, so the high watermark follows the log end.
Anything waiting for a partition to move (a long-poll fetch, a parked acks=all produce)
waits on a future here that the next high-watermark advance resolves.
"""

from __future__ import annotations

import asyncio
from samsa.cluster.metadata import PartitionState
from samsa.protocol.batch import BatchHeader
from samsa.storage.log import AppendInfo, PartitionLog


class Partition:
    def __init__(self, topic: str, index: int, log: PartitionLog, state: PartitionState, broker_id: int):
        self.topic = topic
        self.index = index
        self.log = log
        self.state = state
        self.broker_id = broker_id
        self._waiters: list[asyncio.Future] = []

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    def append(self, records, batches: list[tuple[int, BatchHeader]], now_ms: int) -> AppendInfo:
        info = self.log.append(records, batches, leader_epoch=self.state.leader_epoch, now_ms=now_ms)
        self.maybe_advance_high_watermark()
        return info

    def maybe_advance_high_watermark(self) -> None:
        if len(self.state.isr) <= 1:
            leo = self.log.log_end_offset
            if leo != self.log.high_watermark:
                self.log.set_high_watermark(leo)
                self.wake()

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def watch(self, fut: asyncio.Future) -> None:
        """Resolve ``fut`` at the next high-watermark change."""
        self._waiters.append(fut)

    def unwatch(self, fut: asyncio.Future) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass
