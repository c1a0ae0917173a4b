"""An in-memory share-group state persister, for tests only: it keeps each share partition's
last written state as the share coordinator would return it (the broker's own persister is
the share coordinator's, over ``__share_group_state``)."""

from __future__ import annotations

import copy

from samsa.coordinator.share.state import PartitionState, PersisterError, ShareKey


class MemoryPersister:
    def __init__(self) -> None:
        self.states: dict[ShareKey, PartitionState] = {}
        self.writes = 0
        self.fail_with: int | None = None  # an error code every call raises, to test refusals

    def _check(self) -> None:
        if self.fail_with is not None:
            raise PersisterError(self.fail_with, "refused by the test")

    async def initialize(self, key: ShareKey, state_epoch: int, start_offset: int) -> None:
        self._check()
        self.states[key] = PartitionState(state_epoch=state_epoch, start_offset=start_offset)

    async def read(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        self._check()
        state = copy.deepcopy(self.states.get(key, PartitionState()))
        state.leader_epoch = leader_epoch
        return state

    async def write(self, key: ShareKey, state: PartitionState) -> None:
        self._check()
        self.writes += 1
        self.states[key] = copy.deepcopy(state)

    async def read_summary(self, key: ShareKey, leader_epoch: int) -> PartitionState:
        state = await self.read(key, leader_epoch)
        state.batches = []
        return state

    async def delete(self, key: ShareKey) -> None:
        self._check()
        self.states.pop(key, None)
