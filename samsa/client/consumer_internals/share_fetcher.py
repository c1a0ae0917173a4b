"""Share sessions, ShareFetch and ShareAcknowledge (KIP-932), one session per partition leader.

A share session lives on one broker for (group, member): epoch 0 opens it with every partition
this member reads from that broker, each later request increments the epoch and names only
the partitions added (``topics``) or dropped (``forgotten_topics_data``), plus those with
acknowledgements to carry; epoch -1 closes it. Acknowledgements ride on the next ShareFetch to
the partition's leader, or go alone in a ShareAcknowledge (commit, close). An opening request
carries none (the broker refuses them there): they wait for the next request.

Records come with the offset ranges this member acquired and their delivery counts; only
records inside those ranges are handed out. An acquired offset without a record to hand out
(a control record, a record removed by compaction) is acknowledged as a gap at once.

A partition whose leader moved (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, ...) has the
metadata refreshed, is forgotten by its old session's next request and read in the new
leader's session; what was
acquired from the old leader is that leader's no more (its locks went with the leadership),
so its pending acknowledgements are dropped.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from samsa.client.connection import KafkaConnectionError, KafkaTimeoutError
from samsa.client.consumer_internals.records import CompletedFetch
from samsa.client.metadata import ClusterMetadata
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.protocol.api_keys import ApiKey

log = logging.getLogger(__name__)

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
FINAL_EPOCH = -1
_NETWORK = (KafkaConnectionError, KafkaTimeoutError, OSError)
_MOVED = {errors.E_NOT_LEADER_OR_FOLLOWER, errors.E_FENCED_LEADER_EPOCH, errors.E_UNKNOWN_TOPIC_OR_PARTITION,
          errors.E_UNKNOWN_TOPIC_ID, errors.E_LEADER_NOT_AVAILABLE, errors.E_KAFKA_STORAGE_ERROR,
          errors.E_UNKNOWN_LEADER_EPOCH}
_SESSION_GONE = {errors.E_SHARE_SESSION_NOT_FOUND, errors.E_INVALID_SHARE_SESSION_EPOCH}


def ack_batches(acks: dict[int, int]) -> list[dict]:
    """``{offset: type}`` as the wire's batches: runs of consecutive offsets of one type."""
    out: list[dict] = []
    for offset in sorted(acks):
        kind = acks[offset]
        last = out[-1] if out else None
        if last is not None and last["last_offset"] == offset - 1 and last["acknowledge_types"][0] == kind:
            last["last_offset"] = offset
        else:
            out.append({"first_offset": offset, "last_offset": offset, "acknowledge_types": [kind]})
    return out


@dataclass
class Acquired:
    """One partition's records from one ShareFetch answer, with the ranges acquired."""

    tp: TopicPartition
    records: list[Any]              # ConsumerRecord tuples, undeserialized, inside the ranges
    delivery: dict[int, int]        # offset -> delivery count


@dataclass
class Session:
    node: int
    epoch: int = 0
    partitions: set[TopicPartition] = field(default_factory=set)  # what the broker's session holds
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class ShareFetcher:
    def __init__(self, cluster: ClusterMetadata, group_id: str, member_id: Callable[[], str], config: Any,
                 request_metadata: Callable[[], None],
                 on_acked: Callable[[TopicPartition, set[int], BaseException | None], None] | None = None):
        self.cluster = cluster
        self.group_id = group_id
        self._member_id = member_id
        self.max_wait_ms = config["fetch.max.wait.ms"]
        self.min_bytes = config["fetch.min.bytes"]
        self.max_bytes = config["fetch.max.bytes"]
        self.max_records = config["max.poll.records"]
        self.acquire_mode = 1 if config["share.acquire.mode"] == "record_limit" else 0
        self.check_crcs = config["check.crcs"]
        self.request_timeout_ms = config["request.timeout.ms"]
        self.retry_backoff = config["retry.backoff.ms"] / 1000
        self.request_metadata = request_metadata
        self.sessions: dict[int, Session] = {}
        self.pending: dict[TopicPartition, dict[int, int]] = {}   # acknowledgements not sent yet
        self.acquired_from: dict[TopicPartition, int] = {}        # node a partition's records came from
        self.lock_timeout_ms: int | None = None
        self.ack_errors: dict[TopicPartition, BaseException] = {}  # per-partition answers to acknowledgements
        self.on_acked = on_acked or (lambda tp, offsets, error: None)
        self._warned: dict[TopicPartition, int] = {}  # partitions whose error was logged as a warning
        self.failed = False

    # ---------------------------------------------------------------- acknowledgements

    def acknowledge(self, tp: TopicPartition, offset: int, kind: int) -> None:
        self.pending.setdefault(tp, {})[offset] = kind

    def _take_acks(self, tps: set[TopicPartition]) -> dict[TopicPartition, dict[int, int]]:
        return {tp: self.pending.pop(tp) for tp in list(self.pending) if tp in tps and self.pending[tp]}

    def _restore(self, taken: dict[TopicPartition, dict[int, int]]) -> None:
        for tp, acks in taken.items():
            self.pending.setdefault(tp, {}).update({o: k for o, k in acks.items() if o not in self.pending[tp]})

    def _leader(self, tp: TopicPartition) -> int | None:
        meta = self.cluster.topics.get(tp.topic)
        p = meta.partitions.get(tp.partition) if meta else None
        return p.leader if p is not None and p.leader >= 0 else None

    def _ids(self) -> dict[str, bytes]:
        return {name: m.topic_id for name, m in self.cluster.topics.items()}

    def _topics(self, wanted: dict[TopicPartition, dict[int, int] | None], ids: dict[str, bytes]) -> list[dict]:
        by_id: dict[bytes, list[dict]] = {}
        for tp, acks in sorted(wanted.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
            if tp.topic in ids:
                by_id.setdefault(ids[tp.topic], []).append(
                    {"partition_index": tp.partition, "acknowledgement_batches": ack_batches(acks) if acks else []})
        return [{"topic_id": t, "partitions": ps} for t, ps in by_id.items()]

    # ---------------------------------------------------------------- fetching

    def leaders(self, assignment: set[TopicPartition]) -> dict[int, set[TopicPartition]]:
        """The assigned partitions by leader (partitions without a known leader left out)."""
        out: dict[int, set[TopicPartition]] = {}
        missing = False
        for tp in assignment:
            node = self._leader(tp)
            if node is None:
                missing = True
            else:
                out.setdefault(node, set()).add(tp)
        if missing:
            self.request_metadata()
        return out

    async def fetch(self, node: int, wanted: set[TopicPartition], *, max_wait_ms: int | None = None
                    ) -> list[Acquired]:
        """One ShareFetch to ``node`` for ``wanted`` (its partitions led there), carrying their
        pending acknowledgements; the records acquired."""
        session = self.sessions.setdefault(node, Session(node))
        async with session.lock:
            ids = self._ids()
            opening = session.epoch == 0
            taken = {} if opening else self._take_acks(wanted | session.partitions)
            if opening:
                body_parts: dict[TopicPartition, dict[int, int] | None] = {tp: None for tp in wanted}
                forgotten: set[TopicPartition] = set()
            else:
                body_parts = {tp: None for tp in wanted - session.partitions}
                body_parts.update(taken)
                forgotten = session.partitions - wanted - set(taken)
            fids: dict[bytes, list[int]] = {}
            for tp in sorted(forgotten, key=lambda tp: (tp.topic, tp.partition)):
                if tp.topic in ids:
                    fids.setdefault(ids[tp.topic], []).append(tp.partition)
            body = {"group_id": self.group_id, "member_id": self._member_id(), "share_session_epoch": session.epoch,
                    "max_wait_ms": self.max_wait_ms if max_wait_ms is None else max_wait_ms,
                    "min_bytes": self.min_bytes, "max_bytes": self.max_bytes, "max_records": self.max_records,
                    "batch_size": self.max_records, "share_acquire_mode": self.acquire_mode, "is_renew_ack": False,
                    "topics": self._topics(body_parts, ids),
                    "forgotten_topics_data": [{"topic_id": t, "partitions": ps} for t, ps in fids.items()]}
            try:
                conn = await self.cluster.node(node)
                resp = await conn.request(ApiKey.SHARE_FETCH, body,
                                          timeout_ms=self.request_timeout_ms + body["max_wait_ms"])
            except errors.UnsupportedVersionError:
                raise
            except (*_NETWORK, errors.KafkaError) as e:
                log.debug("ShareFetch to node %d failed: %s", node, e)
                self._session_lost(session, taken)
                self.request_metadata()  # the broker may be gone, its partitions led elsewhere
                await asyncio.sleep(self.retry_backoff)
                return []
            code = resp["error_code"]
            if code:
                return await self._top_error(session, code, resp, taken)
            session.epoch = _next_epoch(session.epoch)
            session.partitions = (session.partitions | wanted) - forgotten
            if resp.get("acquisition_lock_timeout_ms", 0) > 0:
                self.lock_timeout_ms = resp["acquisition_lock_timeout_ms"]
            out = self._read(node, session, resp)
            for tp, acks in taken.items():
                self.on_acked(tp, set(acks), self.ack_errors.pop(tp, None))
        if self.failed:  # partitions in error and nothing else: not again at once
            await asyncio.sleep(self.retry_backoff)
        return out

    async def _top_error(self, session: Session, code: int, resp: dict,
                         taken: dict[TopicPartition, dict[int, int]]) -> list[Acquired]:
        message = resp.get("error_message") or errors.error_name(code)
        if code in _SESSION_GONE:
            log.info("Share session on node %d: %s; opening a new one", session.node, errors.error_name(code))
            self._session_lost(session, taken, keep_acks=True)
            return []
        if code in (errors.E_UNKNOWN_MEMBER_ID, errors.E_FENCED_MEMBER_EPOCH, errors.E_SHARE_SESSION_LIMIT_REACHED,
                    errors.E_COORDINATOR_NOT_AVAILABLE, errors.E_GROUP_ID_NOT_FOUND):
            log.debug("ShareFetch to node %d: %s", session.node, message)
            self._session_lost(session, taken, keep_acks=True)
            await asyncio.sleep(self.retry_backoff)
            return []
        self._session_lost(session, taken, keep_acks=True)
        raise errors.error_for(code, f"ShareFetch of group {self.group_id}: {message}")

    def _session_lost(self, session: Session, taken: dict[TopicPartition, dict[int, int]], *,
                      keep_acks: bool = True) -> None:
        session.epoch = 0
        session.partitions = set()
        if keep_acks:
            self._restore(taken)

    def _read(self, node: int, session: Session, resp: dict) -> list[Acquired]:
        names = {m.topic_id: name for name, m in self.cluster.topics.items()}
        out: list[Acquired] = []
        moved = failed = False
        for t in resp["responses"]:
            name = names.get(t["topic_id"])
            for p in t["partitions"]:
                if name is None:
                    moved = True
                    continue
                tp = TopicPartition(name, p["partition_index"])
                if p.get("acknowledge_error_code"):
                    self.ack_errors[tp] = errors.error_for(
                        p["acknowledge_error_code"], p.get("acknowledge_error_message") or
                        f"Acknowledgement of {tp}: {errors.error_name(p['acknowledge_error_code'])}")
                code = p["error_code"]
                if code in _MOVED:
                    # Forgotten by the next request to this broker once the metadata names the new leader.
                    log.debug("ShareFetch of %s from node %d: %s; refreshing metadata", tp, node,
                              errors.error_name(code))
                    self.pending.pop(tp, None)
                    moved = failed = True
                    continue
                if code:
                    failed = True
                    level = logging.DEBUG if self._warned.get(tp) == code else logging.WARNING
                    self._warned[tp] = code
                    log.log(level, "ShareFetch of %s: %s", tp, p.get("error_message") or errors.error_name(code))
                    continue
                self._warned.pop(tp, None)
                acquired = p["acquired_records"]
                if not acquired:
                    continue
                self.acquired_from[tp] = node
                out.append(self._acquired(tp, bytes(p["records"] or b""), acquired))
        if moved:
            self.request_metadata()
        self.failed = failed and not out
        return out

    def _acquired(self, tp: TopicPartition, data: bytes, ranges: list[dict]) -> Acquired:
        delivery: dict[int, int] = {}
        for r in ranges:
            for offset in range(r["first_offset"], r["last_offset"] + 1):
                delivery[offset] = r["delivery_count"]
        records: list[Any] = []
        if data:
            first = min(delivery)
            try:
                chunk = CompletedFetch(tp, data, first, -1, 0, check_crcs=self.check_crcs)
                while True:
                    got = chunk.take(first, 10000)
                    if not got:
                        break
                    records += [r for r in got if r.offset in delivery]
            except errors.KafkaError as e:
                log.warning("Records of %s could not be read (%s): they are released", tp, e)
                for offset in delivery:
                    self.acknowledge(tp, offset, RELEASE)
                return Acquired(tp, [], {})
        present = {r.offset for r in records}
        for offset in delivery:
            if offset not in present:
                self.acknowledge(tp, offset, GAP)  # control records and the like: nothing to hand out
        return Acquired(tp, records, {o: c for o, c in delivery.items() if o in present})

    # ---------------------------------------------------------------- acknowledging alone

    async def acknowledge_now(self, *, final: bool = False) -> dict[TopicPartition, BaseException | None]:
        """ShareAcknowledge every pending acknowledgement to its leader (``final``: with epoch -1,
        closing every session). The answer per partition: None, or the error."""
        by_node: dict[int, dict[TopicPartition, dict[int, int]]] = {}
        for tp in list(self.pending):
            acks = self.pending[tp]
            if not acks:
                del self.pending[tp]
                continue
            node = self.acquired_from.get(tp, self._leader(tp))
            if node is None:
                continue
            by_node.setdefault(node, {})[tp] = acks
        nodes = set(by_node) | (set(self.sessions) if final else set())
        results: dict[TopicPartition, BaseException | None] = {}
        answers = await asyncio.gather(*[self._acknowledge(n, by_node.get(n, {}), final) for n in nodes],
                                       return_exceptions=True)
        for node, answer in zip(nodes, answers):
            if isinstance(answer, BaseException):
                answer = {tp: answer for tp in by_node.get(node, {})}
            results.update(answer)
            for tp, error in answer.items():
                self.on_acked(tp, set(by_node.get(node, {}).get(tp, ())), error)
        return results

    async def _acknowledge(self, node: int, acks: dict[TopicPartition, dict[int, int]], final: bool
                           ) -> dict[TopicPartition, BaseException | None]:
        session = self.sessions.setdefault(node, Session(node))
        async with session.lock:
            for tp in acks:
                self.pending.pop(tp, None)
            if session.epoch == 0:
                if acks:
                    log.info("No share session on node %d for acknowledgements of %s: their records are "
                             "released when their locks expire", node, sorted(str(tp) for tp in acks))
                return {tp: errors.ShareSessionNotFoundError("no share session") for tp in acks}
            if not acks and not final:
                return {}
            body = {"group_id": self.group_id, "member_id": self._member_id(),
                    "share_session_epoch": FINAL_EPOCH if final else session.epoch, "is_renew_ack": False,
                    "topics": self._topics(dict(acks), self._ids())}
            try:
                conn = await self.cluster.node(node)
                resp = await conn.request(ApiKey.SHARE_ACKNOWLEDGE, body, timeout_ms=self.request_timeout_ms)
            except (*_NETWORK, errors.KafkaError) as e:
                self._session_lost(session, {}, keep_acks=False)
                return {tp: e for tp in acks}
            if final:
                self.sessions.pop(node, None)
            else:
                session.epoch = _next_epoch(session.epoch)
            code = resp["error_code"]
            if code:
                self._session_lost(session, {}, keep_acks=False)
                error = errors.error_for(code, resp.get("error_message") or errors.error_name(code))
                return {tp: error for tp in acks}
            out: dict[TopicPartition, BaseException | None] = {tp: None for tp in acks}
            names = {m.topic_id: name for name, m in self.cluster.topics.items()}
            for t in resp["responses"]:
                for p in t["partitions"]:
                    name = names.get(t["topic_id"])
                    if name is not None and p["error_code"]:
                        tp = TopicPartition(name, p["partition_index"])
                        out[tp] = errors.error_for(p["error_code"], p.get("error_message") or
                                                   f"Acknowledgement of {tp}: {errors.error_name(p['error_code'])}")
            return out

    async def close_sessions(self) -> None:
        """Send what is pending and close every session (epoch -1)."""
        await self.acknowledge_now(final=True)
        self.sessions.clear()


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1
