"""Fetch sessions (KIP-227): the broker's cache of incremental fetch sessions.

A client opens a session with a full fetch (epoch 0); the answer carries a session id, and
from then on the client sends only what changed (partitions added, or whose fetch offset,
max bytes or leader epoch moved) and what it forgets, with the next epoch. The broker keeps
the session's partitions and, for each, the fetch position and what it last answered (high
watermark, log start offset); an incremental answer carries only the partitions with news:
records, an error, a moved high watermark or log start offset. Partitions that answered go
to the back of the session, so a fetch's byte budget reaches every partition in turn.

The cache holds at most ``max.incremental.fetch.session.cache.slots`` sessions. A new
session takes a slot freed, in this order (Kafka's rules): the least recently used session
if idle for longer than ``min.incremental.fetch.session.eviction.ms``; else the least
valuable evictable session — a follower's (privileged) session outranks a consumer's, then
more partitions outrank fewer — if it is worth less than the new one. A session younger
than the eviction time is evictable only by a follower and only if it is a consumer's.
No slot: the answer has session id 0 and the client goes on with full fetches.

Requests (``session_id``, ``session_epoch``):
  (0, -1)  sessionless full fetch;            (id, -1) close ``id``, sessionless full fetch;
  (0, 0)   full fetch opening a session;      (id, 0)  close ``id`` and open a new one;
  (id, n)  incremental: FETCH_SESSION_ID_NOT_FOUND when ``id`` is unknown,
           INVALID_FETCH_SESSION_EPOCH when ``n`` is not the session's next epoch,
           FETCH_SESSION_TOPIC_ID_ERROR when the request's version names topics by id and
           the session's did not (or the reverse).
"""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass

from samsa.clock import now_ms
from samsa.protocol import errors

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
INT32_MAX = 2147483647


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= INT32_MAX else epoch + 1


class CachedPartition:
    """One partition of a session: the request's partition entry and what was last answered."""

    __slots__ = ("fetch", "high_watermark", "log_start_offset")

    def __init__(self, fetch: dict):
        self.fetch = fetch            # the request's partition dict (fetch_offset, partition_max_bytes, ...)
        self.high_watermark = -1
        self.log_start_offset = -1

    def answer(self, entry: dict) -> bool:
        """Record what ``entry`` answers; whether an incremental answer must carry it."""
        must = bool(entry["records"]) or entry["error_code"] != 0 or entry.get("preferred_read_replica", -1) >= 0
        hw = -1 if entry["error_code"] else entry["high_watermark"]
        if hw != self.high_watermark:
            self.high_watermark = hw
            must = True
        if entry["log_start_offset"] != self.log_start_offset:
            self.log_start_offset = entry["log_start_offset"]
            must = True
        return must


class FetchSession:
    __slots__ = ("id", "privileged", "uses_topic_ids", "epoch", "created_ms", "last_used_ms", "partitions")

    def __init__(self, session_id: int, privileged: bool, uses_topic_ids: bool, now: int,
                 partitions: "OrderedDict[tuple, CachedPartition]"):
        self.id = session_id
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.created_ms = now
        self.last_used_ms = now
        self.partitions = partitions  # (topic name or id, index) -> CachedPartition, in fetch order

    @property
    def size(self) -> int:
        return len(self.partitions)

    def __repr__(self) -> str:
        return f"FetchSession(id={self.id}, epoch={self.epoch}, partitions={self.size})"


def _topic_key(t: dict, uses_topic_ids: bool):
    return t["topic_id"] if uses_topic_ids else t["topic"]


def _as_topics(partitions, uses_topic_ids: bool, quiet=None) -> tuple[list[dict], list]:
    """A session's partitions as a request's ``topics``, grouped by topic in session order;
    without those ``quiet(topic key, cached)`` finds nothing to answer for (what it returned
    for them is the second list)."""
    by_topic: dict = {}
    still: list = []
    for (tkey, _), cached in partitions.items():
        if quiet is not None:
            found = quiet(tkey, cached)
            if found is not None:
                still.append(found)
                continue
        parts = by_topic.get(tkey)
        if parts is None:
            parts = by_topic[tkey] = []
        parts.append(cached.fetch)
    field = "topic_id" if uses_topic_ids else "topic"
    return [{field: tkey, "partitions": parts} for tkey, parts in by_topic.items()], still


class FetchContext:
    """One Fetch request's view of the cache: the partitions to read (``topics``, in the
    request's format; for an incremental fetch, set by :meth:`select`) and how to shape the
    answer (``respond``)."""

    __slots__ = ("cache", "kind", "session", "topics", "privileged", "uses_topic_ids", "error", "session_id",
                 "_full_fetch")

    SESSIONLESS, FULL, INCREMENTAL, ERROR = range(4)

    def __init__(self, cache: "FetchSessionCache", kind: int, topics: list, privileged: bool,
                 uses_topic_ids: bool, session: FetchSession | None = None, error: int = 0):
        self.cache = cache
        self.kind = kind
        self.topics = topics
        self.privileged = privileged
        self.uses_topic_ids = uses_topic_ids
        self.session = session
        self.error = error
        self.session_id = 0
        self._full_fetch: OrderedDict | None = None

    def select(self, quiet) -> list:
        """Incremental: leave out of ``topics`` the partitions ``quiet(topic key, cached)`` finds
        with nothing to answer (no records to read, nothing moved since the last answer), and
        return what it returned for them (the handler's partitions to wait on)."""
        if self.kind != self.INCREMENTAL:
            return []
        self.topics, still = _as_topics(self.session.partitions, self.uses_topic_ids, quiet)
        return still

    def has_news(self, responses: list) -> bool:
        """Whether an incremental answer would carry a partition now (without recording it)."""
        session = self.session
        if self.kind != self.INCREMENTAL or session is None:
            return False
        field = "topic_id" if self.uses_topic_ids else "topic"
        parts = session.partitions
        for t in responses:
            tkey = t[field]
            for p in t["partitions"]:
                cached = parts.get((tkey, p["partition_index"]))
                if cached is None or p["error_code"] or p["records"] or p["high_watermark"] != cached.high_watermark:
                    return True
        return False

    def respond(self, responses: list) -> list:
        """The answer's ``responses``: all of them for a full fetch (opening the session
        there if a slot is free), only those with news for an incremental one."""
        if self.kind == self.SESSIONLESS:
            return responses
        field = "topic_id" if self.uses_topic_ids else "topic"
        if self.kind == self.FULL:
            cached: OrderedDict = OrderedDict()
            for t in responses:
                tkey = t[field]
                for p in t["partitions"]:
                    cp = self._full_fetch.get((tkey, p["partition_index"]))
                    if cp is not None:
                        cp.answer(p)
                        cached[(tkey, p["partition_index"])] = cp
            # Partitions the request named but no answer carries (refused ones) stay in it too.
            for key, cp in self._full_fetch.items():
                cached.setdefault(key, cp)
            session = self.cache.create(self.privileged, self.uses_topic_ids, cached)
            self.session_id = session.id if session is not None else 0
            return responses
        session = self.session
        self.session_id = session.id
        parts = session.partitions
        out = []
        moved = []
        for t in responses:
            tkey = t[field]
            kept = []
            for p in t["partitions"]:
                key = (tkey, p["partition_index"])
                cp = parts.get(key)
                if cp is None or cp.answer(p):
                    kept.append(p)
                    if cp is not None:
                        moved.append(key)
            if kept:
                t["partitions"] = kept
                out.append(t)
        for key in moved:
            parts.move_to_end(key)
        return out


@dataclass(frozen=True)
class FetchSessionMetrics:
    """The cache as the broker's metrics show it (Kafka's FetchSessionCache MBeans)."""

    sessions: int
    partitions: int
    evictions: int


class FetchSessionCache:
    """The broker's fetch sessions; one per broker, used on the event loop only."""

    def __init__(self, max_slots: int, eviction_ms: int, clock=now_ms):
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: "OrderedDict[int, FetchSession]" = OrderedDict()  # least recently used first
        self.evictions = 0

    @property
    def num_partitions(self) -> int:
        return sum(s.size for s in self.sessions.values())

    def __len__(self) -> int:
        return len(self.sessions)

    def metrics(self) -> FetchSessionMetrics:
        return FetchSessionMetrics(len(self.sessions), self.num_partitions, self.evictions)

    # ---------------------------------------------------------------- requests

    def context(self, req: dict, version: int, privileged: bool) -> FetchContext:
        """The context of a Fetch request of ``version`` (7+): its session looked up, opened,
        updated or closed as the request's session id and epoch say."""
        uses_topic_ids = version >= 13
        session_id = req.get("session_id", 0)
        epoch = req.get("session_epoch", FINAL_EPOCH)
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id:
                self.remove(session_id)
            if epoch == FINAL_EPOCH:
                return FetchContext(self, FetchContext.SESSIONLESS, req["topics"], privileged, uses_topic_ids)
            full: OrderedDict = OrderedDict()
            for t in req["topics"]:
                tkey = _topic_key(t, uses_topic_ids)
                for p in t["partitions"]:
                    full[(tkey, p["partition"])] = CachedPartition(p)
            ctx = FetchContext(self, FetchContext.FULL, req["topics"], privileged, uses_topic_ids)
            ctx._full_fetch = full
            return ctx
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext(self, FetchContext.ERROR, [], privileged, uses_topic_ids,
                                error=errors.E_FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            return FetchContext(self, FetchContext.ERROR, [], privileged, uses_topic_ids,
                                error=errors.E_INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            return FetchContext(self, FetchContext.ERROR, [], privileged, uses_topic_ids,
                                error=errors.E_FETCH_SESSION_TOPIC_ID_ERROR)
        parts = session.partitions
        for t in req["topics"]:
            tkey = _topic_key(t, uses_topic_ids)
            for p in t["partitions"]:
                key = (tkey, p["partition"])
                cached = parts.get(key)
                if cached is None:
                    parts[key] = CachedPartition(p)
                else:
                    cached.fetch = p
        for t in req.get("forgotten_topics_data") or ():
            tkey = t["topic_id"] if uses_topic_ids else t["topic"]
            for index in t["partitions"]:
                parts.pop((tkey, index), None)
        if not parts:
            self.remove(session.id)  # nothing left to follow: the session ends, sessionless answer
            return FetchContext(self, FetchContext.SESSIONLESS, [], privileged, uses_topic_ids)
        self._touch(session)
        session.epoch = next_epoch(session.epoch)
        return FetchContext(self, FetchContext.INCREMENTAL, None, privileged,
                            uses_topic_ids, session=session)

    # ---------------------------------------------------------------- the cache

    def create(self, privileged: bool, uses_topic_ids: bool, partitions: OrderedDict) -> FetchSession | None:
        """A new session, if a slot is free or can be freed; None otherwise."""
        now = self.clock()
        if len(self.sessions) >= self.max_slots and not self._try_evict(privileged, len(partitions), now):
            return None
        session_id = 0
        while session_id == 0 or session_id in self.sessions:
            session_id = random.randint(1, INT32_MAX)
        session = FetchSession(session_id, privileged, uses_topic_ids, now, partitions)
        self.sessions[session_id] = session
        return session

    def remove(self, session_id: int) -> FetchSession | None:
        return self.sessions.pop(session_id, None)

    def _touch(self, session: FetchSession) -> None:
        session.last_used_ms = self.clock()
        self.sessions.move_to_end(session.id)

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        if not self.sessions:
            return False
        lru = next(iter(self.sessions.values()))
        if now - lru.last_used_ms > self.eviction_ms:
            self.remove(lru.id)
            self.evictions += 1
            return True
        young = now - self.eviction_ms
        if privileged:
            candidates = [s for s in self.sessions.values() if not s.privileged or s.created_ms < young]
        else:
            candidates = [s for s in self.sessions.values() if s.created_ms < young]
        if not candidates:
            return False
        worst = min(candidates, key=lambda s: (s.privileged, s.size, s.id))
        if (privileged, size, 0) < (worst.privileged, worst.size, worst.id):
            return False
        self.remove(worst.id)
        self.evictions += 1
        return True
