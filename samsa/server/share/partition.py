"""One share partition: a share group's in-flight records on one topic partition, on its leader.

The window runs from the start offset (every record before it is done: acknowledged or
archived) to the end offset (the last record ever acquired). Each record in it is AVAILABLE,
ACQUIRED (by one member, under an acquisition lock), ACKNOWLEDGED or ARCHIVED, with the number
of times it was delivered. This module is the window's rules and nothing else: no I/O, no
clock, no timers. :mod:`samsa.server.share.manager` reads the log for it, runs the lock
timers, and writes :meth:`SharePartition.snapshot` through the persister after each change.

Acknowledgements and a member's release are tentative until written, as in Kafka's
SharePartition: :meth:`SharePartition.acknowledge` and :meth:`SharePartition.release_member`
given a ``transition`` token keep the records' previous states; :meth:`SharePartition.commit`
makes the change final once the write succeeded, :meth:`SharePartition.rollback` puts the
records back as they were (acquired by their member under their lock, or available if that
lock ran out meanwhile) when it failed. A record in a pending transition is neither acquired
nor acknowledged again, and the start offset does not move past it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from samsa.coordinator.share.state import DeliveryState, PartitionState, ShareKey, StateBatch
from samsa.protocol import errors
from samsa.protocol.batch import iter_headers

AVAILABLE, ACQUIRED = DeliveryState.AVAILABLE, DeliveryState.ACQUIRED
ACKNOWLEDGED, ARCHIVED = DeliveryState.ACKNOWLEDGED, DeliveryState.ARCHIVED

# AcknowledgeTypes of ShareFetch/ShareAcknowledge
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4

NOT_FOUND = "Batch record not found. The request batch offsets are not found in the cache."
NOT_ACQUIRED = "The offset cannot be acknowledged. The offset is not acquired."
NOT_OWNER = "Member is not the owner of batch record"
PAST_END = "Batch record not found. The first offset in request is past acquired records."

_EXPIRED = object()  # in a pending transition's saved states: the lock the record had ran out meanwhile


@dataclass(slots=True)
class InFlight:
    state: DeliveryState
    count: int  # delivery count
    member: str | None = None  # who holds it, while ACQUIRED
    lock: object | None = None  # the acquisition that holds it (its lock token), while ACQUIRED
    batch: int = -1  # the in-flight batch it was first acquired in (its first offset); -1: never acquired here
    pending: object | None = None  # the transition (a write in flight) that changed it, until committed or rolled back


class Acquired(NamedTuple):
    first_offset: int
    last_offset: int
    delivery_count: int


class Acquisition(NamedTuple):
    ranges: list[Acquired]  # AcquiredRecords of the answer
    records: bytes          # the log's batches holding them
    lock: object | None     # the token of their acquisition lock (None if nothing acquired)
    changed: bool           # records were archived on the way (aborted transactions): write the state


class AckError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


class SharePartition:
    def __init__(self, key: ShareKey, topic: str, index: int):
        self.key = key
        self.topic = topic
        self.index = index
        self.start_offset = 0
        self.end_offset = -1  # the last offset of the window; start - 1 when it is empty
        self.records: dict[int, InFlight] = {}
        self.state_epoch = 0
        self.leader_epoch = -1
        self._undo: dict[object, dict[int, InFlight]] = {}  # pending transition -> the states it changed, as they were

    def __repr__(self) -> str:
        return (f"SharePartition({self.key.group_id}, {self.topic}-{self.index}, "
                f"[{self.start_offset}, {self.end_offset}])")

    # ------------------------------------------------------------------ state

    def load(self, state: PartitionState, reset_offset: int, leader_epoch: int) -> None:
        """The state the persister read; ``reset_offset`` (share.auto.offset.reset) starts an
        uninitialised one. Acquired records were stored as available: they are again."""
        self.state_epoch = max(state.state_epoch, 0)
        self.leader_epoch = leader_epoch
        self.records = {}
        self._undo = {}
        if state.start_offset < 0:
            self.start_offset = reset_offset
            self.end_offset = reset_offset - 1
            return
        self.start_offset = state.start_offset
        end = self.start_offset - 1
        for b in state.batches:
            kind = b.delivery_state if b.delivery_state in (ACKNOWLEDGED, ARCHIVED) else AVAILABLE
            for o in range(max(b.first_offset, self.start_offset), b.last_offset + 1):
                self.records[o] = InFlight(kind, b.delivery_count, batch=b.first_offset)
            end = max(end, b.last_offset)
        for o in range(self.start_offset, end + 1):  # gaps between stored batches: never delivered
            if o not in self.records:
                self.records[o] = InFlight(AVAILABLE, 0)
        self.end_offset = end
        self.advance_start()

    def snapshot(self) -> PartitionState:
        """The state to write: the start offset and every record of the window that was delivered
        or is done, in batches of equal state and delivery count (acquired ones as available).
        Pending transitions are in it as if committed (a write that succeeds commits them), so
        the start offset written is past the done records at the head, pending or not."""
        batches: list[StateBatch] = []
        run: list | None = None  # [first, last, state, count]
        complete = 0
        start = self.start_offset
        while start <= self.end_offset:
            rec = self.records.get(start)
            if rec is not None and rec.state not in (ACKNOWLEDGED, ARCHIVED):
                break
            start += 1
        for o in range(start, self.end_offset + 1):
            rec = self.records.get(o)
            if rec is None or (rec.state == AVAILABLE and rec.count == 0):
                if run is not None:
                    batches.append(StateBatch(run[0], run[1], run[2], run[3]))
                    run = None
                continue
            kind = AVAILABLE if rec.state == ACQUIRED else rec.state
            if kind != AVAILABLE:
                complete += 1
            if run is not None and run[1] == o - 1 and run[2] == kind and run[3] == rec.count:
                run[1] = o
            else:
                if run is not None:
                    batches.append(StateBatch(run[0], run[1], run[2], run[3]))
                run = [o, o, kind, rec.count]
        if run is not None:
            batches.append(StateBatch(run[0], run[1], run[2], run[3]))
        return PartitionState(state_epoch=self.state_epoch, leader_epoch=self.leader_epoch,
                              start_offset=start, delivery_complete_count=complete, batches=batches)

    def advance_start(self) -> bool:
        """Move the start offset over the acknowledged and archived records at its head."""
        moved = False
        records = self.records
        while self.start_offset <= self.end_offset:
            rec = records.get(self.start_offset)
            if rec is not None and (rec.state not in (ACKNOWLEDGED, ARCHIVED) or rec.pending is not None):
                break
            records.pop(self.start_offset, None)
            self.start_offset += 1
            moved = True
        return moved

    def move_start_to(self, log_start_offset: int) -> bool:
        """The log's start moved past the window's (retention, DeleteRecords): those records are gone."""
        if log_start_offset <= self.start_offset:
            return False
        for o in range(self.start_offset, min(log_start_offset, self.end_offset + 1)):
            self.records.pop(o, None)
        self.start_offset = log_start_offset
        self.end_offset = max(self.end_offset, log_start_offset - 1)
        self.advance_start()
        return True

    # ------------------------------------------------------------------ reading

    def next_fetch_offset(self) -> int:
        """The first offset a fetch may acquire: the first available record in the window, else past it."""
        for o in range(self.start_offset, self.end_offset + 1):
            rec = self.records.get(o)
            if rec is not None and rec.state == AVAILABLE and rec.pending is None:
                return o
        return self.end_offset + 1

    def can_acquire(self, max_locks: int) -> bool:
        """Something in the window is available, or the window has room for new records."""
        return self.next_fetch_offset() <= self.end_offset or self.end_offset - self.start_offset + 1 < max_locks

    def in_flight(self) -> int:
        return max(self.end_offset - self.start_offset + 1, 0)

    def acquired_count(self) -> int:
        return sum(1 for r in self.records.values() if r.state == ACQUIRED)

    # ------------------------------------------------------------------ acquiring

    def acquire(self, member: str, data: bytes, max_records: int, batch_size: int, max_locks: int,
                aborted: list[tuple[int, int]] | None = None, record_limit: bool = False,
                delivery_limit: int | None = None) -> Acquisition:
        """Acquire for ``member`` the available records of ``data`` (whole batches read from the
        log at :meth:`next_fetch_offset`), whole batches at a time until ``max_records`` (or
        exactly ``max_records`` with ``record_limit``, ShareAcquireMode record_limit); new
        records only while the window holds fewer than ``max_locks``. ``aborted``
        ((producer id, first offset) of aborted transactions, read_committed): their records
        are archived, not delivered; so are records already delivered ``delivery_limit`` times
        (a leader died while they were acquired for the last time)."""
        token = object()
        # [first, last, count, records in it, in-flight batch (-1: new records)]; a range of records
        # acquired before stays inside the in-flight batch they were first acquired in, as Kafka's do
        ranges: list[list[int]] = []
        taken = 0
        changed = False
        first_pos = end_pos = -1
        pending = sorted(aborted or [], key=lambda a: a[1])
        aborting: set[int] = set()
        records = self.records
        batch_size = max(batch_size, 1)
        for pos, h in iter_headers(data):
            if taken >= max_records:
                break
            last = h.last_offset
            lo = max(h.base_offset, self.start_offset)
            if last < lo:
                continue
            if last > self.end_offset and self.end_offset - self.start_offset + 1 >= max_locks:
                break  # the window is full: nothing new until its start moves
            while pending and pending[0][1] <= last:
                aborting.add(pending.pop(0)[0])
            if h.is_control:
                aborting.discard(h.producer_id)
                is_aborted = False
            else:
                is_aborted = h.is_transactional and h.producer_id in aborting
            took = False
            new_run = True  # a new range starts at a batch boundary once the last one is big enough
            for o in range(lo, last + 1):
                if record_limit and taken >= max_records:
                    break
                if o > self.end_offset:
                    rec = records[o] = InFlight(AVAILABLE, 0)
                    self.end_offset = o
                else:
                    rec = records.get(o)
                    if rec is None or rec.state != AVAILABLE or rec.pending is not None:
                        new_run = True
                        continue
                batch = rec.batch
                if is_aborted or (delivery_limit is not None and rec.count >= delivery_limit):
                    rec.state = ARCHIVED
                    changed = True
                    new_run = True
                    continue
                rec.state = ACQUIRED
                rec.count += 1
                rec.member = member
                rec.lock = token
                took = True
                taken += 1
                run = ranges[-1] if ranges else None
                if run is not None and run[1] == o - 1 and run[2] == rec.count and run[4] == batch and (
                        batch >= 0 or not (new_run and run[3] >= batch_size)):
                    run[1] = o
                    run[3] += 1
                else:
                    run = [o, o, rec.count, 1, batch]
                    ranges.append(run)
                if batch < 0:
                    rec.batch = run[0]
                new_run = False
            if took:
                if first_pos < 0:
                    first_pos = pos
                end_pos = pos + h.size
        if changed:
            self.advance_start()
        if not ranges:
            return Acquisition([], b"", None, changed)
        return Acquisition([Acquired(r[0], r[1], r[2]) for r in ranges], bytes(data[first_pos:end_pos]), token,
                           changed)

    # ------------------------------------------------------------------ acknowledging and releasing

    def _settle(self, rec: InFlight, state: DeliveryState, delivery_limit: int) -> None:
        if state == AVAILABLE and rec.count >= delivery_limit:
            state = ARCHIVED  # delivered as often as the group allows
        rec.state = state
        rec.member = None
        rec.lock = None

    def _begin(self, transition: object | None, rec: InFlight, offset: int) -> None:
        """``rec`` is about to change in ``transition`` (if any): keep its state to roll back to."""
        if transition is not None:
            self._undo.setdefault(transition, {})[offset] = replace(rec)
            rec.pending = transition

    def acknowledge(self, member: str, batches: list[tuple[int, int, list[int]]], delivery_limit: int,
                    transition: object | None = None) -> object | None:
        """Apply ``batches`` ((first offset, last offset, acknowledge types: one for the whole
        range or one per offset), already checked for shape) from ``member``, all or nothing.
        Offsets before the start offset are done already and ignored. AckError
        (INVALID_RECORD_STATE) for a record that is not acquired by ``member``. RENEW keeps a
        record acquired under a new lock: its token is returned (None if nothing was renewed).
        With a ``transition`` token the change is tentative until :meth:`commit` or
        :meth:`rollback` (a renewal is not: it is not part of the written state)."""
        records = self.records
        for first, last, _types in batches:
            if last < self.start_offset:
                continue
            if self.end_offset < self.start_offset:
                raise AckError(errors.E_INVALID_RECORD_STATE, NOT_FOUND)
            if first > self.end_offset:
                raise AckError(errors.E_INVALID_REQUEST, PAST_END)
            for o in range(max(first, self.start_offset), last + 1):
                rec = records.get(o)
                if rec is None or o > self.end_offset:
                    raise AckError(errors.E_INVALID_RECORD_STATE, NOT_FOUND)
                if rec.state != ACQUIRED:
                    raise AckError(errors.E_INVALID_RECORD_STATE, NOT_ACQUIRED)
                if rec.member != member:
                    raise AckError(errors.E_INVALID_RECORD_STATE, NOT_OWNER)
        renewed = None
        for first, last, types in batches:
            for o in range(max(first, self.start_offset), last + 1):
                kind = types[0] if len(types) == 1 else types[o - first]
                rec = records[o]
                if kind == RENEW:
                    if renewed is None:
                        renewed = object()
                    rec.lock = renewed
                else:
                    self._begin(transition, rec, o)
                    if kind == ACCEPT:
                        self._settle(rec, ACKNOWLEDGED, delivery_limit)
                    elif kind == RELEASE:
                        self._settle(rec, AVAILABLE, delivery_limit)
                    else:  # REJECT, GAP
                        self._settle(rec, ARCHIVED, delivery_limit)
        self.advance_start()
        return renewed

    def release_member(self, member: str, delivery_limit: int, transition: object | None = None) -> bool:
        """The member's session closed or it left the group: what it holds is available again
        (tentatively with a ``transition`` token, as :meth:`acknowledge`)."""
        changed = False
        for o, rec in self.records.items():
            if rec.state == ACQUIRED and rec.member == member:
                self._begin(transition, rec, o)
                self._settle(rec, AVAILABLE, delivery_limit)
                changed = True
        if changed:
            self.advance_start()
        return changed

    def expire(self, lock: object, delivery_limit: int) -> bool:
        """The acquisition lock ``lock`` ran out: its records not acknowledged yet are available again."""
        changed = False
        for rec in self.records.values():
            if rec.lock is lock and rec.state == ACQUIRED:
                self._settle(rec, AVAILABLE, delivery_limit)
                changed = True
        for saved in self._undo.values():  # a pending transition rolled back returns these as available
            for prev in saved.values():
                if prev.lock is lock:
                    prev.lock = _EXPIRED
        if changed:
            self.advance_start()
        return changed

    # ------------------------------------------------------------------ transitions (writes in flight)

    def pending(self) -> list[object]:
        """The transitions not written yet: a snapshot taken now holds their changes."""
        return list(self._undo)

    def is_pending(self, transition: object) -> bool:
        return transition in self._undo

    def commit(self, transitions: list[object]) -> bool:
        """A write holding these transitions' changes succeeded: they are final. True if any was pending."""
        done = False
        for transition in transitions:
            saved = self._undo.pop(transition, None)
            if saved is None:
                continue
            done = True
            for o in saved:
                rec = self.records.get(o)
                if rec is not None and rec.pending is transition:
                    rec.pending = None
        if done:
            self.advance_start()
        return done

    def rollback(self, transition: object, delivery_limit: int) -> bool:
        """Its write failed: the records it changed are as they were before it (those whose lock
        ran out meanwhile are available, or archived at the delivery count limit). True if it
        was pending."""
        saved = self._undo.pop(transition, None)
        if saved is None:
            return False
        for o, prev in saved.items():
            rec = self.records.get(o)
            if rec is None or rec.pending is not transition:
                continue  # gone with the log's start
            rec.state, rec.count, rec.member, rec.lock, rec.pending = (prev.state, prev.count, prev.member,
                                                                       prev.lock, None)
            if prev.lock is _EXPIRED:
                self._settle(rec, AVAILABLE, delivery_limit)
        self.advance_start()
        return True
