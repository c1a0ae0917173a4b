"""KRaft's I/O layer: runs the sans-I/O consensus (``samsa.raft.consensus``) between processes.

The driver owns the three things the core leaves out:

* **the metadata log** ``<metadata.log.dir>/__cluster_metadata-0``, in Kafka's log format on
  samsa's own segment code (:class:`~samsa.storage.log.PartitionLog`; the leader's batches are
  built here with the offsets and epoch the core gave, a follower's are the fetched bytes), and
  the ``quorum-state`` file beside it (QuorumStateData JSON, written durably before what follows);
* **time**: one asyncio timer for the core's ``SetTimer``, on the monotonic clock;
* **the wire**: requests from the other voters arrive through the controller listener
  (:meth:`RaftDriver.request`, answered when the core says), and the core's own requests go out on
  one connection per voter, their answers fed back to the core;
* **the voters' endpoints**: static voters (``controller.quorum.voters``, kraft.version 0) as
  configured; dynamic voters (KIP-853, kraft.version 1) from the last VotersRecord in the log (the
  bootstrap checkpoint's, a snapshot's, the log's: :class:`VoterSets`), with their directory ids;
  an observer without a leader asks ``controller.quorum.bootstrap.servers`` (ids -2, -3, ... as
  Kafka numbers them) and learns the leader's endpoint from the answers (NodeEndpoints). The
  VotersRecord the core appends for AddRaftVoter/RemoveRaftVoter/UpdateRaftVoter is written here,
  with the endpoints and directory ids the request gave; a voter whose endpoints differ from those
  in the voter set sends the leader UpdateRaftVoter, as Kafka's voters do after they start.

As Kafka's active controller does, a new leader whose log holds no metadata records yet writes
the bootstrap records ``samsa storage format`` left (``bootstrap.checkpoint``), and the leader
appends a NoOpRecord every ``metadata.max.idle.interval.ms``.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from samsa.client.connection import BrokerConnection
from samsa.protocol import errors
from samsa.protocol import metadata_records as mr
from samsa.protocol.api_keys import ApiKey
from samsa.protocol.batch import iter_headers
from samsa.protocol.records import build_batch, iter_batches
from samsa.raft import messages as m
from samsa.raft.consensus import LogState, RaftConfig, RaftNode, RaftState
from samsa.raft.quorum_state import QuorumStateData, uuid_to_str
from samsa.storage.config import LogConfig
from samsa.storage.files import write_atomically
from samsa.storage.kraft import (METADATA_PARTITION_DIR, SNAPSHOT_SUFFIX, bootstrap_snapshot, decode_snapshot,
                                 snapshot_name)
from samsa.storage.log import PartitionLog

log = logging.getLogger(__name__)

METADATA_TOPIC = mr.METADATA_TOPIC
#: Kafka's Uuid.METADATA_TOPIC_ID: the reserved id 0-1 ("AAAAAAAAAAAAAAAAAAAAAQ").
METADATA_TOPIC_ID = bytes(15) + b"\x01"
QUORUM_STATE = "quorum-state"
# A failed request is reported to the core after this, doubling for each failure in a row to the
# same node up to the maximum (Kafka's reconnect.backoff.ms and reconnect.backoff.max.ms defaults).
RECONNECT_BACKOFF_MS, RECONNECT_BACKOFF_MAX_MS = 50, 1000
PARTITION_METADATA = "partition.metadata"
#: The versions this driver speaks to the other voters (Kafka 4.4's).
VERSIONS = {ApiKey.VOTE: 2, ApiKey.BEGIN_QUORUM_EPOCH: 1, ApiKey.END_QUORUM_EPOCH: 1, ApiKey.FETCH: 18,
            ApiKey.FETCH_SNAPSHOT: 1}


@dataclass(frozen=True)
class Voter:
    node_id: int
    host: str
    port: int


def voters_record(node_id: int, directory_id: bytes, endpoints) -> dict:
    """One voter of a VotersRecord: ``endpoints`` as (listener name, host, port)."""
    return {"voter_id": node_id, "voter_directory_id": directory_id,
            "endpoints": [{"name": n, "host": h, "port": p} for n, h, p in endpoints],
            "k_raft_version_feature": {"min_supported_version": 0, "max_supported_version": 1}}


class VoterSets:
    """The voter sets of the metadata log with their endpoints and directory ids (KIP-853): the
    one at the log start (``base``: the snapshot's or the bootstrap checkpoint's VotersRecord) and
    each later VotersRecord as (offset, voters by id); the core keeps the same history as ids."""

    def __init__(self, base: dict[int, dict] | None = None):
        self.base: dict[int, dict] = dict(base or {})
        self.history: list[tuple[int, dict[int, dict]]] = []

    @staticmethod
    def of(records) -> dict[int, dict]:
        return {r["voter_id"]: r for r in records or []}

    def current(self) -> dict[int, dict]:
        return self.history[-1][1] if self.history else self.base

    def at(self, offset: int) -> dict[int, dict]:
        """The voter set in force for a snapshot ending at ``offset`` (the last one before it)."""
        before = [vs for o, vs in self.history if o < offset]
        return before[-1] if before else self.base

    def append(self, offset: int, records) -> None:
        self.history.append((offset, self.of(records)))

    def truncate(self, offset: int) -> None:
        while self.history and self.history[-1][0] >= offset:
            self.history.pop()

    def fold(self, start: int) -> None:
        """The log now starts at ``start``: the sets before it are the base."""
        self.base = self.at(start)
        self.history = [(o, vs) for o, vs in self.history if o >= start]

    def find(self, node_id: int) -> dict | None:
        """The newest record of ``node_id`` (it may have left the set since)."""
        for _, vs in reversed(self.history):
            if node_id in vs:
                return vs[node_id]
        return self.base.get(node_id)

    def log_state(self) -> tuple[frozenset, tuple[tuple[int, frozenset], ...]]:
        return frozenset(self.base), tuple((o, frozenset(vs)) for o, vs in self.history)


def endpoint(record: dict, listener: str) -> tuple[str, int] | None:
    """A voter's endpoint on ``listener`` (its first one when it has none by that name)."""
    eps = record.get("endpoints") or []
    ep = next((e for e in eps if e["name"] == listener), eps[0] if eps else None)
    return (ep["host"], ep["port"]) if ep else None


def control_records(buf):
    """``(offset, control kind, data)`` of each control record (KRaftVersion, VotersRecord, ...) in ``buf``."""
    for header, records in iter_batches(buf):
        if header.is_control:
            for r in records:
                kind, data = mr.decode_control(r.key, r.value)
                yield r.offset, kind, data


def _now() -> int:
    return int(time.monotonic() * 1000)


class MetadataLog:
    """``__cluster_metadata-0`` on samsa's log: the core's batches in, record bytes out."""

    def __init__(self, metadata_dir: Path, config: LogConfig | None = None):
        self.dir = metadata_dir / METADATA_PARTITION_DIR
        self.log = PartitionLog.open(self.dir, config or LogConfig(), recover=True)
        meta = self.dir / PARTITION_METADATA
        if not meta.exists():   # the topic id, as Kafka's log keeps it beside the segments
            write_atomically(meta, f"version: 0\ntopic_id: {uuid_to_str(METADATA_TOPIC_ID)}".encode())
        self.has_records = self._any_records()

    def _any_records(self) -> bool:
        """Whether the log holds a batch of metadata records (not only control batches), read a
        megabyte at a time from its start."""
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            headers = [h for _, h in iter_headers(self.log.read(offset, 1 << 20, min_one_batch=True))]
            if not headers:
                return False
            if any(not h.is_control for h in headers):
                return True
            offset = headers[-1].next_offset
        return False

    def control_records(self) -> list[tuple[int, int, dict]]:
        """``(offset, kind, data)`` of the KRaftVersion and VotersRecord control records in the log
        (KIP-853), read a megabyte at a time from its start."""
        out = []
        offset = self.log.log_start_offset
        while offset < self.log.log_end_offset:
            buf = self.log.read(offset, 1 << 20, min_one_batch=True)
            headers = [h for _, h in iter_headers(buf)]
            if not headers:
                break
            out += [(o, k, d) for o, k, d in control_records(buf) if k in (mr.KRAFT_VERSION, mr.KRAFT_VOTERS)]
            offset = headers[-1].next_offset
        return out

    def snapshots(self) -> list[tuple[m.SnapshotId, Path]]:
        return self.snapshots_in(self.dir)

    @staticmethod
    def latest_snapshot_in(partition_dir: Path) -> tuple[m.SnapshotId, Path] | None:
        snaps = MetadataLog.snapshots_in(partition_dir)
        return snaps[-1] if snaps else None

    @staticmethod
    def snapshots_in(partition_dir: Path) -> list[tuple[m.SnapshotId, Path]]:
        """The snapshots taken of a metadata log (KIP-630 ``.checkpoint`` files), oldest first; not
        the bootstrap checkpoint ``format`` writes (offset 0)."""
        out = []
        for path in partition_dir.glob("*" + SNAPSHOT_SUFFIX):
            end, _, epoch = path.name[:-len(SNAPSHOT_SUFFIX)].partition("-")
            if end.isdigit() and epoch.isdigit() and int(end) > 0:
                out.append((m.SnapshotId(int(end), int(epoch)), path))
        return sorted(out, key=lambda x: (x[0].end_offset, x[0].epoch))

    def latest_snapshot(self) -> tuple[m.SnapshotId, Path] | None:
        snaps = self.snapshots()
        return snaps[-1] if snaps else None

    def state(self) -> LogState:
        snap = self.latest_snapshot()
        start, end = self.log.log_start_offset, self.log.log_end_offset
        if snap is None:
            return LogState(start_offset=start, end_offset=end, epochs=tuple(self.log.leader_epochs.entries))
        sid, path = snap
        if end < sid.end_offset:   # the log ends before its snapshot: it starts over there
            self.log.truncate_fully_and_start_at(sid.end_offset)
            end = sid.end_offset
        epochs = tuple((e, o) for e, o in self.log.leader_epochs.entries if o >= sid.end_offset)
        return LogState(start_offset=sid.end_offset, end_offset=end, epochs=epochs,
                        snapshot=(sid, path.stat().st_size))

    def delete_before(self, offset: int) -> None:
        """The log before ``offset`` is in a snapshot: the log start moves there (whole segments
        below it are deleted) and so do older snapshots."""
        if offset <= self.log.log_end_offset:
            self.log.delete_records_before(offset)
        for sid, path in self.snapshots():
            if sid.end_offset < offset:
                path.unlink(missing_ok=True)

    def write_snapshot_chunk(self, sid: m.SnapshotId, position: int, data: bytes) -> None:
        part = self.dir / (snapshot_name(sid.end_offset, sid.epoch) + ".part")
        with open(part, "r+b" if position and part.exists() else "wb") as f:
            f.seek(position)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def install_snapshot(self, sid: m.SnapshotId) -> Path:
        """A fetched snapshot replaces the whole log, which starts over at its end."""
        path = self.dir / snapshot_name(sid.end_offset, sid.epoch)
        os.replace(self.dir / (path.name + ".part"), path)
        self.log.truncate_fully_and_start_at(sid.end_offset)
        self.log.flush()
        self.has_records = True
        return path

    def append(self, batches: tuple[m.Batch, ...], voters: list[int]) -> None:
        buf = bytearray()
        for b in batches:
            if isinstance(b.data, (bytes, bytearray, memoryview)):   # fetched from the leader
                buf += b.data
            elif isinstance(b.data, tuple) and b.data[0] == "LeaderChange":
                key, value = mr.encode_control(mr.LEADER_CHANGE, {
                    "leader_id": b.data[1], "voters": [{"voter_id": v} for v in voters], "granting_voters": []})
                buf += build_batch([(key, value, _wall())], base_offset=b.base_offset, is_control=True,
                                   partition_leader_epoch=b.epoch)
            elif isinstance(b.data, list):                             # metadata records (values)
                buf += build_batch([(None, v, _wall()) for v in b.data], base_offset=b.base_offset,
                                   partition_leader_epoch=b.epoch)
            else:
                raise ValueError(f"cannot write {b.data!r} to the metadata log")
        headers = list(iter_headers(buf, strict=True))
        self.log.append_as_follower(buf, headers)
        self.log.flush()   # durable before the core counts it (a follower's next fetch, the leader's end)
        self.has_records = self.has_records or any(not h.is_control for _, h in headers)

    def truncate(self, offset: int) -> None:
        self.log.truncate_to(offset)
        self.log.flush()
        self.has_records = self._any_records()

    def read(self, start: int, end: int, max_bytes: int) -> bytes:
        return self.log.read(start, max_bytes, max_offset=end, min_one_batch=True)

    def close(self) -> None:
        self.log.close()


def _wall() -> int:
    return int(time.time() * 1000)


def parse_batches(records: bytes) -> tuple[m.Batch, ...]:
    """A Fetch answer's record bytes as the core's batches (offsets, epoch, control; data: the bytes)."""
    out = []
    for pos, h in iter_headers(records):
        data = bytes(records[pos:pos + h.size])
        voters = None
        if h.is_control:
            try:
                for _, kind, d in control_records(data):
                    if kind == mr.KRAFT_VOTERS:
                        voters = frozenset(v["voter_id"] for v in d["voters"])
            except (errors.KafkaError, KeyError, ValueError):
                pass     # not one Samsa decodes: not a VotersRecord
        out.append(m.Batch(h.base_offset, h.last_offset, h.partition_leader_epoch, data=data,
                           control=h.is_control, voters=voters))
    return tuple(out)


class RaftDriver:
    """One voter of the metadata quorum, on this process's event loop."""

    def __init__(self, node_id: int, voters: list[Voter], cluster_id: str, metadata_dir: Path,
                 config: RaftConfig, *, idle_interval_ms: int = 500, fetch_max_bytes: int = 1048576,
                 log_config: LogConfig | None = None, bootstrap_servers: list[tuple[str, int]] = (),
                 listener_name: str = "", directory_id: bytes = m.ZERO_UUID):
        self.node_id = node_id
        self.voters = {v.node_id: v for v in voters}     # static voters (controller.quorum.voters); else {}
        self.dynamic = not self.voters                   # KIP-853: the voter set is the log's
        # controller.quorum.bootstrap.servers, numbered -2, -3, ... as Kafka's observers number them
        self.bootstrap = {-2 - i: hp for i, hp in enumerate(bootstrap_servers)}
        self.listener_name = listener_name
        self.directory_id = directory_id
        self.own_endpoints: list[tuple[str, str, int]] = []   # (listener, host, port) a voter serves on
        self.voter_sets = VoterSets()
        self.kraft_version = 0
        self._learned: dict[int, tuple[str, int]] = {}        # endpoints learned from NodeEndpoints
        self._replica_dirs: dict[int, bytes] = {}              # directory ids fetchers sent (the leader's view)
        self._pending_records: dict[int, dict] = {}            # voter records the next VotersRecord carries
        self._updated_in_epoch = -1                            # UpdateRaftVoter sent in this epoch
        self.cluster_id = cluster_id
        self.metadata_dir = metadata_dir
        self.config = config
        self.idle_interval_ms = idle_interval_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.log_config = log_config
        self.node: RaftNode
        # Called with the path of a snapshot fetched from the leader, once it replaced the log.
        self.on_snapshot_installed: Callable[[Path], None] | None = None
        self.log: MetadataLog
        self.high_watermark = -1
        self._timer: asyncio.TimerHandle | None = None
        self._noop: asyncio.TimerHandle | None = None
        self._answers: dict[tuple[int, int], asyncio.Future] = {}
        self._inbound_cid = 0
        self._conns: dict[int, BrokerConnection] = {}
        self._connecting: dict[int, asyncio.Lock] = {}
        self._failures: dict[int, int] = {}   # node -> its requests failed in a row
        self._tasks: set[asyncio.Task] = set()
        self._closed = False
        self._leader: tuple | None = None    # (leader and epoch, state) last logged
        self._appended: m.Appended | m.AppendRefused | None = None
        # Called with the new high watermark each time it moves (the metadata image follows it).
        self.on_committed: Callable[[int], None] | None = None
        # Called after the leader or this node's state changed.
        self.on_leader_changed: Callable[[], None] | None = None

    # ---- lifecycle

    @property
    def quorum_state_path(self) -> Path:
        return self.log.dir / QUORUM_STATE

    def start(self) -> None:
        self.log = MetadataLog(self.metadata_dir, self.log_config)
        qs = None
        if self.quorum_state_path.exists():
            qs = QuorumStateData.from_json(self.quorum_state_path.read_text())
        state = self.log.state()
        boot = bootstrap_snapshot(self.metadata_dir)
        boot = decode_snapshot(boot.read_bytes()) if boot is not None else None
        snap = self.log.latest_snapshot()
        snap = decode_snapshot(snap[1].read_bytes()) if snap is not None else None
        controls = [(o, k, d) for o, k, d in self.log.control_records() if o >= state.start_offset]
        self.kraft_version = max([boot.kraft_version if boot else 0, snap.kraft_version if snap else 0]
                                 + [d["k_raft_version"] for _, k, d in controls if k == mr.KRAFT_VERSION])
        if self.dynamic:
            base = snap.voters if snap is not None and snap.voters is not None else (boot.voters if boot else None)
            self.voter_sets = VoterSets(VoterSets.of(base))
            for o, k, d in controls:
                if k == mr.KRAFT_VOTERS:
                    self.voter_sets.append(o, d["voters"])
            voters, sets = self.voter_sets.log_state()
            state = replace(state, voters=voters, voter_sets=sets)
        self.node = RaftNode(self.node_id, frozenset(self.voters), cluster_id=self.cluster_id, config=self.config,
                             quorum_state=qs, log=state, rng=random.Random(),
                             bootstrap_servers=sorted(self.bootstrap, reverse=True) if self.bootstrap else None,
                             kraft_version=self.kraft_version)
        log.info("[RaftManager id=%d] metadata log %s: offsets %d..%d, quorum state %s", self.node_id, self.log.dir,
                 self.log.log.log_start_offset, self.log.log.log_end_offset, qs.to_json() if qs else "(none)")
        self._run(self.node.start(_now()))

    async def resign(self, timeout_ms: int = 1000) -> None:
        """A leader going away gracefully tells the voters (EndQuorumEpoch), so they elect at once."""
        if self.node.state != RaftState.LEADER:
            return
        self._handle(m.Resign())
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_ms / 1000)

    async def stop(self) -> None:
        self._closed = True
        for h in (self._timer, self._noop):
            if h is not None:
                h.cancel()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for c in self._conns.values():
            c.close()
        for fut in self._answers.values():
            if not fut.done():
                fut.cancel()
        self.log.close()

    # ---- events into the core

    def _handle(self, event) -> None:
        if self._closed:
            return
        try:
            self._run(self.node.handle(event, _now()))
        except Exception:
            # A broken rule of Raft (RaftInvariantError) or a metadata log that cannot be written:
            # going on could lose committed records, so the process stops, as Kafka's does.
            log.critical("[RaftManager id=%d] fatal error handling %s; halting", self.node_id, type(event).__name__,
                         exc_info=True)
            logging.shutdown()
            os._exit(1)

    def request(self, source: int, message) -> asyncio.Future:
        """A request from another replica: the future of the core's answer."""
        self._inbound_cid += 1
        cid = self._inbound_cid
        fut = asyncio.get_running_loop().create_future()
        self._answers[(source, cid)] = fut
        self._handle(m.Received(source, message, cid))
        return fut

    def snapshot_taken(self, sid: m.SnapshotId, size: int) -> None:
        """A snapshot of committed state was written: the log before its end may go."""
        self._handle(m.SnapshotTaken(sid, size))

    def append(self, values: list[bytes]) -> m.Appended | m.AppendRefused | None:
        """Metadata records to append (on the leader; refused elsewhere): where they went."""
        self._appended = None
        self._handle(m.Append(values, len(values)))
        return self._appended

    # ---- outputs of the core

    def _run(self, outputs: list) -> None:
        for out in outputs:
            if isinstance(out, m.PersistQuorumState):
                # static voters (controller.quorum.voters, kraft.version 0): version 0, as Kafka writes it
                text = out.state.to_json(0, self.voters) if not self.dynamic else out.state.to_json()
                write_atomically(self.quorum_state_path, text.encode())
            elif isinstance(out, m.AppendToLog):
                batches = tuple(self._voters_batch(b) if isinstance(b.data, tuple) and (
                    b.data[0] == "Voters" or len(b.data) == 3) else b for b in out.batches)
                self.log.append(batches, sorted(self.node.voters))
                for b in batches:
                    if b.control:
                        self._control_appended(b)
            elif isinstance(out, m.TruncateTo):
                log.info("[RaftManager id=%d] truncating the metadata log to %d", self.node_id, out.offset)
                self.log.truncate(out.offset)
                self.voter_sets.truncate(out.offset)
            elif isinstance(out, m.Send):
                self._send(out)
            elif isinstance(out, m.Committed):
                self.high_watermark = out.high_watermark
                self.log.log.set_high_watermark(out.high_watermark)
                if self.on_committed is not None:
                    self.on_committed(out.high_watermark)
            elif isinstance(out, m.LeaderChanged):
                pass    # the leader is looked at after the outputs (a follower's move is not always reported)
            elif isinstance(out, m.SetTimer):
                self._set_timer(out.deadline_ms)
            elif isinstance(out, m.DeleteLogBefore):
                self.log.delete_before(out.offset)
                self.voter_sets.fold(out.offset)
            elif isinstance(out, m.WriteSnapshotChunk):
                self.log.write_snapshot_chunk(out.snapshot_id, out.position, out.data)
            elif isinstance(out, m.InstallSnapshot):
                path = self.log.install_snapshot(out.snapshot_id)
                log.info("[RaftManager id=%d] installed snapshot %s fetched from the leader", self.node_id, path.name)
                if self.on_snapshot_installed is not None:
                    self.on_snapshot_installed(path)
                voters = frozenset(self.voters)
                snap = decode_snapshot(path.read_bytes())
                if self.dynamic and snap.voters is not None:
                    self.voter_sets = VoterSets(VoterSets.of(snap.voters))
                    voters = frozenset(self.voter_sets.base)
                elif self.dynamic:
                    voters = frozenset(self.node.voters)
                self.kraft_version = max(self.kraft_version, snap.kraft_version)
                self.node.kraft_version = self.kraft_version
                asyncio.get_running_loop().call_soon(self._handle, m.SnapshotLoaded(out.snapshot_id, voters))
            elif isinstance(out, (m.Appended, m.AppendRefused)):
                self._appended = out
            else:
                log.warning("[RaftManager id=%d] %s is not supported yet (no snapshots)", self.node_id,
                            type(out).__name__)
        seen = (self.node.leader, self.node.state)
        if seen != self._leader:
            self._leader = seen
            self._leader_changed(seen[0])
            if self.on_leader_changed is not None:
                self.on_leader_changed()
            self._maybe_update_voter()

    # ---- dynamic voters (KIP-853)

    def _voters_batch(self, b: m.Batch) -> m.Batch:
        """The core's VotersRecord as a control batch (a first leader's after its LeaderChange and
        KRaftVersion): each voter's record as the voter set has it, or as the AddRaftVoter/
        UpdateRaftVoter that changed it gave it."""
        current = self.voter_sets.current()
        records = []
        for i in b.data[-1]:
            rec = self._pending_records.pop(i, None) or current.get(i) or self.voter_sets.find(i)
            records.append(rec or voters_record(i, m.ZERO_UUID, []))
        now = _wall()
        control = [mr.encode_control(mr.KRAFT_VOTERS, {"version": 0, "voters": records})]
        if b.data[0] == "LeaderChange":     # a first leader's: LeaderChange, KRaftVersion, VotersRecord
            control[:0] = [mr.encode_control(mr.LEADER_CHANGE, {
                "leader_id": b.data[1], "voters": [{"voter_id": v} for v in b.data[2]], "granting_voters": []}),
                mr.encode_control(mr.KRAFT_VERSION, {"k_raft_version": self.kraft_version})]
        data = build_batch([(k, v, now) for k, v in control], base_offset=b.base_offset, is_control=True,
                           partition_leader_epoch=b.epoch)
        return replace(b, data=bytes(data))

    def _control_appended(self, b: m.Batch) -> None:
        for offset, kind, data in control_records(b.data if isinstance(b.data, (bytes, bytearray)) else b""):
            if kind == mr.KRAFT_VOTERS and self.dynamic:
                self.voter_sets.append(offset, data["voters"])
                log.info("[RaftManager id=%d] voter set at offset %d: %s", self.node_id, offset,
                         ", ".join(f"{v['voter_id']}@{endpoint(v, self.listener_name)}" for v in data["voters"]))
            elif kind == mr.KRAFT_VERSION:
                self.kraft_version = max(self.kraft_version, data["k_raft_version"])
                self.node.kraft_version = self.kraft_version

    def address(self, node_id: int) -> tuple[str, int] | None:
        """Where to reach a voter (or a bootstrap server, ids below -1)."""
        if node_id in self.bootstrap:
            return self.bootstrap[node_id]
        if node_id in self.voters:
            return self.voters[node_id].host, self.voters[node_id].port
        rec = self.voter_sets.find(node_id)
        found = endpoint(rec, self.listener_name) if rec is not None else None
        return found or self._learned.get(node_id)

    def learned(self, node_id: int, host: str, port: int) -> None:
        """A leader's endpoint, as an answer's NodeEndpoints gave it."""
        if node_id >= 0 and host and port > 0:
            self._learned[node_id] = (host, port)

    def saw_replica(self, replica_id: int, directory_id: bytes) -> None:
        if replica_id >= 0:
            self._replica_dirs[replica_id] = directory_id

    def directory_id_of(self, node_id: int) -> bytes:
        if node_id == self.node_id:
            return self.directory_id
        rec = self.voter_sets.current().get(node_id)
        if rec is not None:
            return rec["voter_directory_id"]
        return self._replica_dirs.get(node_id, m.ZERO_UUID)

    def voter_change(self, source: int, message, record: dict | None = None) -> asyncio.Future:
        """An AddRaftVoter, RemoveRaftVoter or UpdateRaftVoter for the core, ``record`` the voter as
        the VotersRecord should have it. The directory id must match: of a caught-up observer to
        be added, of the voter to be removed or updated."""
        node, code = self.node, 0
        if node.state == RaftState.LEADER and self.kraft_version >= 1:
            vid, vdir = message.voter_id, message.voter_directory_id
            current = self.voter_sets.current()
            if isinstance(message, m.AddRaftVoterRequest):
                if vid not in node.voters and self._replica_dirs.get(vid, m.ZERO_UUID) != vdir:
                    code = errors.E_REQUEST_TIMED_OUT
            elif vid in current and current[vid]["voter_directory_id"] != vdir:
                code = errors.E_VOTER_NOT_FOUND
        if code:
            fut = asyncio.get_running_loop().create_future()
            fut.set_result(m.UpdateRaftVoterResponse(code) if isinstance(message, m.UpdateRaftVoterRequest) else
                           (m.AddRaftVoterResponse if isinstance(message, m.AddRaftVoterRequest)
                            else m.RemoveRaftVoterResponse)(code, "no such replica with that directory id"))
            return fut
        if record is not None:
            self._pending_records[record["voter_id"]] = record
        fut = self.request(source, message)
        if record is not None:
            fut.add_done_callback(lambda _f, vid=record["voter_id"]: self._pending_records.pop(vid, None))
        return fut

    def _maybe_update_voter(self) -> None:
        """A voter following a leader whose voter set has other endpoints for it than it serves
        on sends UpdateRaftVoter (once per epoch, as Kafka's voters do after they start)."""
        node = self.node
        if (not self.dynamic or self.kraft_version < 1 or not self.own_endpoints or node.state != RaftState.FOLLOWER
                or node.leader_id < 0 or self._updated_in_epoch == node.epoch):
            return
        rec = self.voter_sets.current().get(self.node_id)
        if rec is None:
            return
        mine = voters_record(self.node_id, self.directory_id, self.own_endpoints)
        if (sorted((e["name"], e["host"], e["port"]) for e in rec["endpoints"])
                == sorted((e["name"], e["host"], e["port"]) for e in mine["endpoints"])):
            return
        self._updated_in_epoch = node.epoch
        task = asyncio.ensure_future(self._update_voter(node.leader_id, node.epoch, mine))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _update_voter(self, leader: int, epoch: int, mine: dict) -> None:
        body = {"cluster_id": self.cluster_id, "current_leader_epoch": epoch, "voter_id": self.node_id,
                "voter_directory_id": self.directory_id,
                "listeners": [{"name": e["name"], "host": e["host"], "port": e["port"]} for e in mine["endpoints"]],
                "k_raft_version_feature": mine["k_raft_version_feature"]}
        try:
            conn = await self._connection(leader)
            resp = await conn.request(ApiKey.UPDATE_RAFT_VOTER, body, 0,
                                      timeout_ms=self.config.request_timeout_ms * 2)
        except (errors.KafkaError, OSError, asyncio.TimeoutError) as e:
            resp = {"error_code": -1, "error": str(e)}
        log.info("[RaftManager id=%d] UpdateRaftVoter to leader %d (epoch %d) with endpoints %s: %s", self.node_id,
                 leader, epoch, body["listeners"], errors.error_name(resp["error_code"]) if resp["error_code"] >= 0
                 else resp.get("error"))
        if resp["error_code"] and not self._closed:
            self._updated_in_epoch = -1      # again on the next change of leader or state

    def _set_timer(self, deadline_ms: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        delay = max(deadline_ms - _now(), 0) / 1000
        self._timer = asyncio.get_running_loop().call_later(delay, self._handle, m.TimerExpired())

    def _leader_changed(self, leader: m.LeaderIdAndEpoch) -> None:
        log.info("[RaftManager id=%d] leader %s in epoch %d (this node: %s)", self.node_id,
                 leader.leader_id if leader.leader_id >= 0 else "unknown", leader.leader_epoch,
                 self.node.state.value)
        if self._noop is not None:
            self._noop.cancel()
            self._noop = None
        if leader.leader_id == self.node_id and self.node.state == RaftState.LEADER:
            asyncio.get_running_loop().call_soon(self._became_leader, leader.leader_epoch)

    def _became_leader(self, epoch: int) -> None:
        """The active controller's first records: the bootstrap records when the log has none."""
        if self.node.state != RaftState.LEADER or self.node.epoch != epoch:
            return
        if not self.log.has_records:
            path = bootstrap_snapshot(self.metadata_dir)
            records = decode_snapshot(path.read_bytes()).records if path is not None else []
            values = [mr.encode(n, v, d) for n, v, d in records] or [mr.encode("NoOpRecord", 0, {})]
            log.info("[QuorumController id=%d] writing %d bootstrap records", self.node_id, len(values))
            self.append(values)
        self._schedule_noop(epoch)

    def _schedule_noop(self, epoch: int) -> None:
        if self.idle_interval_ms <= 0:
            return

        def tick() -> None:
            if self._closed or self.node.state != RaftState.LEADER or self.node.epoch != epoch:
                return
            self.append([mr.encode("NoOpRecord", 0, {})])
            self._schedule_noop(epoch)
        self._noop = asyncio.get_running_loop().call_later(self.idle_interval_ms / 1000, tick)

    # ---- the wire

    def _send(self, out: m.Send) -> None:
        if isinstance(out.message, (m.VoteResponse, m.BeginQuorumEpochResponse, m.EndQuorumEpochResponse,
                                    m.FetchResponse, m.FetchSnapshotResponse, m.AddRaftVoterResponse,
                                    m.RemoveRaftVoterResponse, m.UpdateRaftVoterResponse)):
            fut = self._answers.pop((out.destination, out.correlation_id), None)
            if fut is not None and not fut.done():
                fut.set_result(out.message)
            return
        if not isinstance(out.message, (m.VoteRequest, m.BeginQuorumEpochRequest, m.EndQuorumEpochRequest,
                                        m.FetchRequest, m.FetchSnapshotRequest)):
            log.warning("[RaftManager id=%d] cannot send %s to %d yet", self.node_id, type(out.message).__name__,
                        out.destination)
            return
        task = asyncio.ensure_future(self._request(out.destination, out.message, out.correlation_id))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self, dest: int) -> BrokerConnection:
        lock = self._connecting.setdefault(dest, asyncio.Lock())
        async with lock:      # one connection per voter, however many requests wait for it
            conn = self._conns.get(dest)
            if conn is not None and conn.connected:
                return conn
            if conn is not None:
                conn.close()
            where = self.address(dest)
            if where is None:
                raise errors.KafkaError(f"no endpoint known for node {dest}")
            timeout = self.config.request_timeout_ms
            conn = BrokerConnection(where[0], where[1], client_id=f"raft-client-{self.node_id}",
                                    request_timeout_ms=timeout, connect_timeout_ms=timeout)
            self._conns[dest] = conn
            await conn.connect()
            return conn

    async def _request(self, dest: int, message, cid: int) -> None:
        if self.dynamic:     # static voters (kraft.version 0) have no directory ids on the wire
            key, body = to_wire(message, self.cluster_id, self.fetch_max_bytes, self.directory_id,
                                self.directory_id_of(dest) if dest >= 0 else m.ZERO_UUID, self.own_endpoints)
        else:
            key, body = to_wire(message, self.cluster_id, self.fetch_max_bytes)
        try:
            conn = await self._connection(dest)
            version = conn.pick_version(key, max_version=VERSIONS[key])
            timeout = self.config.request_timeout_ms + (message.max_wait_ms if key == ApiKey.FETCH else 0)
            resp = await conn.request(key, body, version, timeout_ms=timeout)
        except (errors.KafkaError, OSError, asyncio.TimeoutError) as e:
            log.debug("[RaftManager id=%d] %s to %d failed: %s", self.node_id, type(message).__name__, dest, e)
            conn = self._conns.pop(dest, None)
            if conn is not None:
                conn.close()
            n = self._failures.get(dest, 0)
            self._failures[dest] = n + 1
            delay_ms = min(RECONNECT_BACKOFF_MS << min(n, 10), RECONNECT_BACKOFF_MAX_MS)
            asyncio.get_running_loop().call_later(delay_ms / 1000, self._handle, m.RequestFailed(dest, cid))
            return
        self._failures.pop(dest, None)
        for ep in resp.get("node_endpoints") or ():
            self.learned(ep["node_id"], ep["host"], ep["port"])
        try:
            answer = from_wire_response(key, resp)
        except (KeyError, TypeError, ValueError) as e:
            log.warning("[RaftManager id=%d] dropping a malformed %s answer from %d: %s", self.node_id,
                        type(message).__name__, dest, e)
            return
        if answer is not None:
            self._handle(m.Received(dest, answer, cid))

    # ---- what the controller listener reads

    def describe_quorum(self) -> dict:
        """DescribeQuorum's partition: the core's view, its times on the wall clock."""
        part = self.node.describe_quorum()
        shift = _wall() - _now()
        for row in part["current_voters"] + part["observers"]:
            # static voters (controller.quorum.voters) have none
            row["replica_directory_id"] = self.directory_id_of(row["replica_id"]) if self.dynamic else m.ZERO_UUID
            for k in ("last_fetch_timestamp", "last_caught_up_timestamp"):
                if row[k] >= 0:
                    row[k] += shift
        return part

    def voter_endpoints(self) -> list[tuple[int, str, int]]:
        """The voters and where they listen (DescribeQuorum's Nodes, DescribeCluster on a controller)."""
        out = []
        for i in sorted(self.node.voters):
            where = self.address(i)
            if where is not None:
                out.append((i, *where))
        return out

    def leader_endpoint(self) -> list[dict]:
        """The leader's endpoint, for a Fetch answer's NodeEndpoints (as Kafka's leader sends it)."""
        leader = self.node.leader_id
        where = self.address(leader) if leader >= 0 else None
        return [{"node_id": leader, "host": where[0], "port": where[1], "rack": None}] if where else []

    def read_records(self, rng: m.RecordsRange, max_bytes: int) -> bytes:
        return self.log.read(rng.start_offset, rng.end_offset, max_bytes)

    def read_snapshot(self, chunk: m.SnapshotChunk) -> bytes:
        path = self.log.dir / snapshot_name(chunk.snapshot_id.end_offset, chunk.snapshot_id.epoch)
        with open(path, "rb") as f:
            f.seek(chunk.position)
            return f.read(chunk.max_bytes)


# ---------------------------------------------------------------- wire <-> core messages

def _one_partition(body: dict, topics_key: str = "topics") -> dict | None:
    topics = body.get(topics_key) or []
    if len(topics) != 1 or len(topics[0]["partitions"]) != 1:
        return None
    return topics[0]["partitions"][0]


def to_wire(msg, cluster_id: str, fetch_max_bytes: int, own_dir: bytes = m.ZERO_UUID,
            dest_dir: bytes = m.ZERO_UUID, own_endpoints=()) -> tuple[int, dict]:
    """A core request as the Kafka request body (one topic, one partition); ``own_dir`` and
    ``dest_dir`` the directory ids of this replica and of the one asked (KIP-853), ``own_endpoints``
    where this leader listens (BeginQuorumEpoch, EndQuorumEpoch)."""
    leader_endpoints = [{"name": n, "host": h, "port": p} for n, h, p in own_endpoints]
    if isinstance(msg, m.VoteRequest):
        return ApiKey.VOTE, {"cluster_id": cluster_id, "voter_id": msg.voter_id, "topics": [{
            "topic_name": METADATA_TOPIC, "partitions": [{
                "partition_index": 0, "replica_epoch": msg.replica_epoch, "replica_id": msg.replica_id,
                "replica_directory_id": own_dir, "voter_directory_id": dest_dir,
                "last_offset_epoch": msg.last_offset_epoch, "last_offset": msg.last_offset,
                "pre_vote": msg.pre_vote}]}]}
    if isinstance(msg, m.BeginQuorumEpochRequest):
        return ApiKey.BEGIN_QUORUM_EPOCH, {"cluster_id": cluster_id, "voter_id": msg.voter_id, "topics": [{
            "topic_name": METADATA_TOPIC, "partitions": [{
                "partition_index": 0, "voter_directory_id": dest_dir, "leader_id": msg.leader_id,
                "leader_epoch": msg.leader_epoch}]}], "leader_endpoints": leader_endpoints}
    if isinstance(msg, m.EndQuorumEpochRequest):
        return ApiKey.END_QUORUM_EPOCH, {"cluster_id": cluster_id, "topics": [{
            "topic_name": METADATA_TOPIC, "partitions": [{
                "partition_index": 0, "leader_id": msg.leader_id, "leader_epoch": msg.leader_epoch,
                "preferred_successors": list(msg.preferred_candidates),
                "preferred_candidates": [{"candidate_id": c, "candidate_directory_id": m.ZERO_UUID}
                                         for c in msg.preferred_candidates]}]}], "leader_endpoints": leader_endpoints}
    if isinstance(msg, m.FetchRequest):
        return ApiKey.FETCH, {
            "cluster_id": cluster_id, "replica_id": msg.replica_id,
            "replica_state": {"replica_id": msg.replica_id, "replica_epoch": msg.replica_epoch},
            "max_wait_ms": msg.max_wait_ms, "min_bytes": 0, "max_bytes": fetch_max_bytes, "isolation_level": 0,
            "session_id": 0, "session_epoch": -1, "topics": [{
                "topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [{
                    "partition": 0, "current_leader_epoch": msg.current_leader_epoch,
                    "fetch_offset": msg.fetch_offset, "last_fetched_epoch": msg.last_fetched_epoch,
                    "log_start_offset": msg.log_start_offset, "partition_max_bytes": fetch_max_bytes,
                    "replica_directory_id": own_dir, "high_watermark": msg.high_watermark}]}],
            "forgotten_topics_data": [], "rack_id": ""}
    if isinstance(msg, m.FetchSnapshotRequest):
        return ApiKey.FETCH_SNAPSHOT, {"cluster_id": cluster_id, "replica_id": msg.replica_id,
                                       "max_bytes": min(msg.max_bytes, fetch_max_bytes), "topics": [{
                                           "name": METADATA_TOPIC, "partitions": [{
                                               "partition": 0, "current_leader_epoch": msg.current_leader_epoch,
                                               "snapshot_id": {"end_offset": msg.snapshot_id.end_offset,
                                                               "epoch": msg.snapshot_id.epoch},
                                               "position": msg.position, "replica_directory_id": own_dir}]}]}
    raise TypeError(f"the driver does not send {type(msg).__name__}")


def from_wire_response(key: int, body: dict):
    """A Kafka response body as the core's response (None when it is not about the metadata partition)."""
    if key == ApiKey.FETCH:
        topics = body.get("responses") or []
        if body.get("error_code"):
            return m.FetchResponse(body["error_code"], -1, -1, m.LeaderIdAndEpoch(-1, -1))
        if len(topics) != 1 or len(topics[0]["partitions"]) != 1:
            return None
        p = topics[0]["partitions"][0]
        div, snap, leader = p.get("diverging_epoch"), p.get("snapshot_id"), p.get("current_leader") or {}
        return m.FetchResponse(
            p["error_code"], p["high_watermark"], p["log_start_offset"],
            m.LeaderIdAndEpoch(leader.get("leader_id", -1), leader.get("leader_epoch", -1)),
            diverging_epoch=(m.EpochEndOffset(div["epoch"], div["end_offset"])
                             if div and div.get("epoch", -1) >= 0 and div.get("end_offset", -1) >= 0 else None),
            snapshot_id=(m.SnapshotId(snap["end_offset"], snap["epoch"])
                         if snap and snap.get("end_offset", -1) >= 0 and snap.get("epoch", -1) >= 0 else None),
            records=parse_batches(p.get("records") or b""))
    if key == ApiKey.FETCH_SNAPSHOT:
        topics = body.get("topics") or []
        if body.get("error_code") or len(topics) != 1 or len(topics[0]["partitions"]) != 1:
            return m.FetchSnapshotResponse(body.get("error_code") or errors.E_INVALID_REQUEST, m.LeaderIdAndEpoch(-1, -1))
        p = topics[0]["partitions"][0]
        leader, snap = p.get("current_leader") or {}, p.get("snapshot_id") or {}
        return m.FetchSnapshotResponse(
            p["error_code"], m.LeaderIdAndEpoch(leader.get("leader_id", -1), leader.get("leader_epoch", -1)),
            m.SnapshotId(snap["end_offset"], snap["epoch"]) if snap.get("end_offset", -1) >= 0 else None,
            p["size"], p["position"], bytes(p.get("unaligned_records") or b""))
    p = _one_partition(body)
    top = body.get("error_code", 0)
    if key == ApiKey.VOTE:
        if p is None:
            return m.VoteResponse(top or errors.E_INVALID_REQUEST, -1, -1, False)
        return m.VoteResponse(top or p["error_code"], p["leader_id"], p["leader_epoch"], p["vote_granted"])
    if key == ApiKey.BEGIN_QUORUM_EPOCH:
        if p is None:
            return m.BeginQuorumEpochResponse(top or errors.E_INVALID_REQUEST, -1, -1)
        return m.BeginQuorumEpochResponse(top or p["error_code"], p["leader_id"], p["leader_epoch"])
    if key == ApiKey.END_QUORUM_EPOCH:
        if p is None:
            return m.EndQuorumEpochResponse(top or errors.E_INVALID_REQUEST, -1, -1)
        return m.EndQuorumEpochResponse(top or p["error_code"], p["leader_id"], p["leader_epoch"])
    return None


def from_wire_request(key: int, version: int, body: dict):
    """A Kafka request body as the core's request; None when it is not one partition of the
    metadata topic (the caller answers with the error Kafka gives)."""
    cluster_id = body.get("cluster_id")
    if key == ApiKey.FETCH:
        topics = body.get("topics") or []
        if len(topics) != 1 or len(topics[0]["partitions"]) != 1:
            return None
        t = topics[0]
        if (t.get("topic_id") != METADATA_TOPIC_ID) if version >= 13 else (t.get("topic") != METADATA_TOPIC):
            return None
        p = t["partitions"][0]
        if p["partition"] != 0:
            return None
        replica_id = (body.get("replica_state") or {}).get("replica_id", -1) if version >= 15 else body["replica_id"]
        replica_epoch = (body.get("replica_state") or {}).get("replica_epoch", -1) if version >= 15 else -1
        return m.FetchRequest(cluster_id, replica_id, p["current_leader_epoch"], p["fetch_offset"],
                              p["last_fetched_epoch"], p["log_start_offset"], max_wait_ms=body["max_wait_ms"],
                              replica_epoch=replica_epoch, high_watermark=p.get("high_watermark", m.NO_HW))
    if key == ApiKey.FETCH_SNAPSHOT:
        topics = body.get("topics") or []
        if len(topics) != 1 or topics[0]["name"] != METADATA_TOPIC or len(topics[0]["partitions"]) != 1:
            return None
        p = topics[0]["partitions"][0]
        if p["partition"] != 0:
            return None
        return m.FetchSnapshotRequest(cluster_id, body.get("replica_id", -1), p["current_leader_epoch"],
                                      m.SnapshotId(p["snapshot_id"]["end_offset"], p["snapshot_id"]["epoch"]),
                                      p["position"], body.get("max_bytes", 2**31 - 1))
    topics = body.get("topics") or []
    if len(topics) != 1 or topics[0]["topic_name"] != METADATA_TOPIC or len(topics[0]["partitions"]) != 1:
        return None
    p = topics[0]["partitions"][0]
    if p["partition_index"] != 0:
        return None
    if key == ApiKey.VOTE:
        return m.VoteRequest(cluster_id, body.get("voter_id", -1), p["replica_epoch"], p["replica_id"],
                             p["last_offset_epoch"], p["last_offset"], pre_vote=p.get("pre_vote", False))
    if key == ApiKey.BEGIN_QUORUM_EPOCH:
        return m.BeginQuorumEpochRequest(cluster_id, body.get("voter_id", -1), p["leader_id"], p["leader_epoch"])
    if key == ApiKey.END_QUORUM_EPOCH:
        cands = ([c["candidate_id"] for c in p.get("preferred_candidates") or []] if version >= 1
                 else list(p.get("preferred_successors") or []))
        return m.EndQuorumEpochRequest(cluster_id, p["leader_id"], p["leader_epoch"], tuple(cands))
    return None


def to_wire_response(key: int, msg, records: bytes | None = None, node_endpoints=()) -> dict:
    """The core's answer as the Kafka response body (``node_endpoints``: the leader's, for Fetch)."""
    if isinstance(msg, m.FetchResponse):
        part = {"partition_index": 0, "error_code": msg.error_code, "high_watermark": msg.high_watermark,
                "last_stable_offset": msg.high_watermark, "log_start_offset": msg.log_start_offset,
                "current_leader": {"leader_id": msg.current_leader.leader_id,
                                   "leader_epoch": msg.current_leader.leader_epoch},
                "aborted_transactions": [], "preferred_read_replica": -1, "records": records or b""}
        if msg.diverging_epoch is not None:
            part["diverging_epoch"] = {"epoch": msg.diverging_epoch.epoch, "end_offset": msg.diverging_epoch.end_offset}
        if msg.snapshot_id is not None:
            part["snapshot_id"] = {"end_offset": msg.snapshot_id.end_offset, "epoch": msg.snapshot_id.epoch}
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": [{
            "topic": METADATA_TOPIC, "topic_id": METADATA_TOPIC_ID, "partitions": [part]}],
            "node_endpoints": list(node_endpoints)}
    if isinstance(msg, m.FetchSnapshotResponse):
        sid = msg.snapshot_id or m.SnapshotId(-1, -1)
        return {"throttle_time_ms": 0, "error_code": 0, "topics": [{"name": METADATA_TOPIC, "partitions": [{
            "index": 0, "error_code": msg.error_code, "snapshot_id": {"end_offset": sid.end_offset, "epoch": sid.epoch},
            "current_leader": {"leader_id": msg.current_leader.leader_id,
                               "leader_epoch": msg.current_leader.leader_epoch},
            "size": msg.size, "position": msg.position, "unaligned_records": records or b""}]}]}
    part = {"partition_index": 0, "error_code": msg.error_code, "leader_id": msg.leader_id,
            "leader_epoch": msg.leader_epoch}
    if isinstance(msg, m.VoteResponse):
        part["vote_granted"] = msg.vote_granted
    return {"error_code": 0, "topics": [{"topic_name": METADATA_TOPIC, "partitions": [part]}]}
