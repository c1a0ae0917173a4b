"""Followers copy their leaders' logs with the Fetch API, as Kafka's replica fetchers do.

One fetcher task per (leader, ``num.replica.fetchers`` slot) long-polls the leader for
all the partitions it follows there, appends what comes back with the leader's offsets,
and takes the leader's high watermark. A partition that has just started following
first asks the leader, with OffsetForLeaderEpoch, where its own latest epoch ends on the
leader, and truncates anything past that: a returning old leader drops the tail the new
leader never had.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Callable

from samsa.broker_config import BrokerConfig
from samsa.client.connection import BrokerConnection
from samsa.client.fetch_session import FetchSessionHandler
from samsa.cluster.metadata import BrokerInfo
from samsa.cluster.partition import Partition
from samsa.cluster.inter_broker import inter_broker_security
from samsa.protocol import batch, errors
from samsa.protocol.api_keys import ApiKey
from samsa.storage.leader_epoch import UNDEFINED
from samsa.storage.log import PartitionLog
from samsa.timeouts import within

log = logging.getLogger(__name__)

BrokerLookup = Callable[[int], BrokerInfo | None]  # a live broker's endpoint by id
# Around each write to a partition's log: an I/O error takes its log directory offline (KIP-112).
LogIo = Callable[[PartitionLog], AbstractContextManager]
FETCH_VERSION = 12  # topic names, leader epochs, log start offsets
RETRIABLE = {errors.E_NOT_LEADER_OR_FOLLOWER, errors.E_FENCED_LEADER_EPOCH, errors.E_UNKNOWN_LEADER_EPOCH,
             errors.E_UNKNOWN_TOPIC_OR_PARTITION, errors.E_LEADER_NOT_AVAILABLE}


@dataclass
class Followed:
    partition: Partition
    leader_epoch: int
    truncated: bool = False  # the OffsetForLeaderEpoch step is done for this epoch


class ReplicaFetcher:
    """Follows every partition of one leader assigned to this slot."""

    def __init__(self, config: BrokerConfig, broker_info: BrokerLookup, leader_id: int, slot: int,
                 io: LogIo = lambda plog: nullcontext()):
        self.config = config
        self.io = io
        self.broker_id = config.broker_id
        self.broker_info = broker_info
        self.leader_id = leader_id
        self.name = f"ReplicaFetcherThread-{slot}-{leader_id}"
        self.followed: dict[tuple[str, int], Followed] = {}
        self._changed = asyncio.Event()
        self._conn: BrokerConnection | None = None
        self.session = FetchSessionHandler()  # KIP-227: after the first fetch, only what changed
        self._task = asyncio.ensure_future(self._run())

    def add(self, partition: Partition) -> None:
        self.followed[(partition.topic, partition.index)] = Followed(partition, partition.state.leader_epoch)
        self._changed.set()

    def remove(self, key: tuple[str, int]) -> None:
        self.followed.pop(key, None)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        if self._conn is not None:
            self._conn.close()

    # ---------------------------------------------------------------- the loop

    async def _run(self) -> None:
        config = self.config
        backoff = config["replica.fetch.backoff.ms"] / 1000
        while True:
            if not self.followed:
                self._changed.clear()
                await self._changed.wait()
                continue
            try:
                conn = await self._connection()
                await self._truncate(conn)
                await self._fetch(conn)
            except asyncio.CancelledError:
                raise
            except errors.KafkaError as e:
                log.info("[%s] %s; retrying in %d ms", self.name, e, backoff * 1000)
                self._drop_connection()
                await self._sleep(backoff)
            except Exception:
                log.exception("[%s] failed; retrying", self.name)
                self._drop_connection()
                await self._sleep(backoff)

    async def _sleep(self, seconds: float) -> None:
        self._changed.clear()
        try:
            await within(self._changed.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    def _drop_connection(self) -> None:
        self.session.failed()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    async def _connection(self) -> BrokerConnection:
        if self._conn is not None and self._conn.connected:
            return self._conn
        leader = self.broker_info(self.leader_id)
        if leader is None:
            raise errors.LeaderNotAvailableError(f"broker {self.leader_id} is not alive")
        timeout = self.config["replica.socket.timeout.ms"]
        host, port = leader.endpoint(self.config.inter_broker_listener) or (leader.host, leader.port)
        conn = BrokerConnection(host, port, client_id=f"broker-{self.broker_id}-fetcher",
                                request_timeout_ms=timeout, connect_timeout_ms=timeout,
                                security=inter_broker_security(self.config))
        await conn.connect()
        self._conn = conn
        return conn

    # ---------------------------------------------------------------- truncation

    async def _truncate(self, conn: BrokerConnection) -> None:
        pending = [f for f in self.followed.values() if not f.truncated]
        if not pending:
            return
        topics: dict[str, list[dict]] = {}
        for f in pending:
            p = f.partition
            topics.setdefault(p.topic, []).append({
                "partition": p.index, "current_leader_epoch": f.leader_epoch,
                "leader_epoch": p.log.leader_epochs.latest_epoch})
        resp = await conn.request(ApiKey.OFFSET_FOR_LEADER_EPOCH, {
            "replica_id": self.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}, version=4)
        for t in resp["topics"]:
            for r in t["partitions"]:
                f = self.followed.get((t["topic"], r["partition"]))
                if f is None or f.truncated:
                    continue
                if r["error_code"]:
                    if r["error_code"] not in RETRIABLE:
                        log.warning("[%s] OffsetForLeaderEpoch %s-%d: %s", self.name, t["topic"], r["partition"],
                                    errors.error_name(r["error_code"]))
                    continue
                self._truncate_one(f.partition, r["leader_epoch"], r["end_offset"])
                f.truncated = True

    def _truncate_one(self, p: Partition, leader_epoch: int, end_offset: int) -> None:
        plog = p.log
        leo = plog.log_end_offset
        if end_offset == UNDEFINED or leader_epoch == UNDEFINED:
            target = min(p.high_watermark, leo)  # the leader knows none of our epochs
        else:
            mine = plog.leader_epochs.end_offset_for(leader_epoch, leo)[1]
            target = min(end_offset, leo if mine == UNDEFINED else mine)
        if target < leo:
            log.info("[%s] truncating %s from %d to %d (leader epoch %d ends at %d on the leader)",
                     self.name, p, leo, target, leader_epoch, end_offset)
            with self.io(plog):
                plog.truncate_to(target)

    # ---------------------------------------------------------------- fetching

    async def _fetch(self, conn: BrokerConnection) -> None:
        config = self.config
        ready = [f for f in self.followed.values() if f.truncated]
        if not ready:
            await self._sleep(config["replica.fetch.backoff.ms"] / 1000)
            return
        max_bytes = config["replica.fetch.max.bytes"]
        wanted = {}
        for f in ready:
            p = f.partition
            wanted[(p.topic, p.index)] = {
                "partition": p.index, "current_leader_epoch": f.leader_epoch,
                "fetch_offset": p.log.log_end_offset, "last_fetched_epoch": -1,
                "log_start_offset": p.log.log_start_offset, "partition_max_bytes": max_bytes}
        wait_ms = config["replica.fetch.wait.max.ms"]
        session = self.session
        resp = await conn.request(ApiKey.FETCH, {
            "replica_id": self.broker_id, "max_wait_ms": wait_ms,
            "min_bytes": config["replica.fetch.min.bytes"],
            "max_bytes": config["replica.fetch.response.max.bytes"], "isolation_level": 0,
            **session.build(wanted), "rack_id": config["broker.rack"] or ""},
            version=FETCH_VERSION, timeout_ms=wait_ms + config["replica.socket.timeout.ms"])
        if not session.handle_response(resp):
            log.info("[%s] fetch session: %s; a full fetch next", self.name, errors.error_name(resp["error_code"]))
            return
        if resp["error_code"]:
            raise errors.error_for(resp["error_code"], f"fetch from broker {self.leader_id} failed")
        asked = {(f.partition.topic, f.partition.index): f for f in ready}
        for t in resp["responses"]:
            for r in t["partitions"]:
                key = (t["topic"], r["partition_index"])
                f = asked.get(key)
                if f is not None and self.followed.get(key) is f:  # still following in the same epoch
                    await self._apply(conn, f, r)

    async def _apply(self, conn: BrokerConnection, f: Followed, r: dict) -> None:
        p = f.partition
        code = r["error_code"]
        if code == errors.E_OFFSET_OUT_OF_RANGE:
            await self._reset_out_of_range(conn, p)
            return
        if code:
            if code not in RETRIABLE:
                log.warning("[%s] fetch of %s: %s", self.name, p, errors.error_name(code))
            f.truncated = False  # recheck where our log and the leader's agree before going on
            return
        data = r["records"]
        with self.io(p.log):
            if data:
                whole = list(batch.iter_headers(data))
                if whole:
                    end = whole[-1][0] + whole[-1][1].size
                    chunk = bytearray(data[:end])
                    for pos, h in whole:
                        if batch.compute_crc(chunk, pos, h.size) != h.crc:
                            raise errors.CorruptRecordError(f"batch at offset {h.base_offset} of {p} has a bad CRC")
                    p.log.append_as_follower(chunk, whole)
            if r["log_start_offset"] > p.log.log_start_offset:
                p.log.delete_records_before(min(r["log_start_offset"], p.log.log_end_offset))
            hw = min(r["high_watermark"], p.log.log_end_offset)
            if data or hw != p.log.high_watermark:
                p.log.set_high_watermark(hw)
                p.wake()  # consumers long-polling this follower (KIP-392)

    async def _reset_out_of_range(self, conn: BrokerConnection, p: Partition) -> None:
        """Our log end is outside the leader's log: past its end, or below its start."""
        offsets = {}
        for ts in (-2, -1):
            resp = await conn.request(ApiKey.LIST_OFFSETS, {
                "replica_id": self.broker_id, "isolation_level": 0,
                "topics": [{"name": p.topic, "partitions": [
                    {"partition_index": p.index, "current_leader_epoch": p.state.leader_epoch, "timestamp": ts}]}]},
                version=4)
            part = resp["topics"][0]["partitions"][0]
            if part["error_code"]:
                raise errors.error_for(part["error_code"], f"ListOffsets for {p} failed")
            offsets[ts] = part["offset"]
        start, end = offsets[-2], offsets[-1]
        leo = p.log.log_end_offset
        with self.io(p.log):
            if leo > end:
                log.info("[%s] truncating %s to the leader's end %d", self.name, p, end)
                p.log.truncate_to(end)
            elif leo < start:
                log.info("[%s] %s starts again at the leader's log start %d", self.name, p, start)
                p.log.truncate_fully_and_start_at(start)


class ReplicaFetcherManager:
    """Which fetcher follows which partition: by leader, then by a hash over the slots."""

    def __init__(self, config: BrokerConfig, broker_info: BrokerLookup, io: LogIo = lambda plog: nullcontext()):
        self.io = io
        self.config = config
        self.broker_info = broker_info
        self.fetchers: dict[tuple[int, int], ReplicaFetcher] = {}
        self.slot_of: dict[tuple[str, int], tuple[int, int]] = {}

    def follow(self, partition: Partition) -> None:
        key = (partition.topic, partition.index)
        self.unfollow(key)
        slots = self.config["num.replica.fetchers"]
        slot = (partition.state.leader, zlib.crc32(f"{partition.topic}-{partition.index}".encode()) % slots)
        fetcher = self.fetchers.get(slot)
        if fetcher is None:
            fetcher = self.fetchers[slot] = ReplicaFetcher(self.config, self.broker_info, slot[0], slot[1], self.io)
        fetcher.add(partition)
        self.slot_of[key] = slot

    def unfollow(self, key: tuple[str, int]) -> None:
        slot = self.slot_of.pop(key, None)
        if slot is not None:
            self.fetchers[slot].remove(key)

    async def stop(self) -> None:
        fetchers, self.fetchers = list(self.fetchers.values()), {}
        self.slot_of.clear()
        await asyncio.gather(*(f.stop() for f in fetchers))
