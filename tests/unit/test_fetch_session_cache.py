"""The fetch-session cache's rules (KIP-227) on a fake clock: opening, updating and closing
sessions, and which session a new one evicts when the slots are full."""

from __future__ import annotations

from samsa.client.fetch_session import FetchSessionHandler
from samsa.protocol import errors
from samsa.server.fetch_sessions import FetchSessionCache

EVICTION_MS = 1000


class Clock:
    def __init__(self):
        self.now = 10_000

    def __call__(self) -> int:
        return self.now


def _req(session_id, epoch, parts, topic="t", forgotten=()):
    return {"session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": topic, "partitions": [{"partition": i, "fetch_offset": 0} for i in parts]}]
            if parts else [],
            "forgotten_topics_data": [{"topic": topic, "partitions": list(forgotten)}] if forgotten else []}


def _answer(index, hw=0, records=b"", error=0):
    return {"partition_index": index, "error_code": error, "high_watermark": hw, "log_start_offset": 0,
            "records": records, "preferred_read_replica": -1}


def _open(cache, n, privileged=False, topic="t"):
    ctx = cache.context(_req(0, 0, range(n), topic), 12, privileged)
    ctx.respond([{"topic": topic, "partitions": [_answer(i) for i in range(n)]}])
    return ctx.session_id


def test_incremental_answer_carries_only_news_and_rotates():
    cache = FetchSessionCache(10, EVICTION_MS, Clock())
    sid = _open(cache, 3)
    assert sid and len(cache) == 1 and cache.num_partitions == 3
    ctx = cache.context(_req(sid, 1, []), 12, False)
    ctx.select(None)
    assert [p["partition"] for t in ctx.topics for p in t["partitions"]] == [0, 1, 2]
    out = ctx.respond([{"topic": "t", "partitions": [_answer(0), _answer(1, hw=5, records=b"x"), _answer(2)]}])
    assert [p["partition_index"] for t in out for p in t["partitions"]] == [1]
    # partition 1 answered: it goes to the back of the session
    ctx = cache.context(_req(sid, 2, []), 12, False)
    assert ctx.select(lambda tkey, cached: "quiet" if cached.fetch["partition"] == 2 else None) == ["quiet"]
    assert [p["partition"] for t in ctx.topics for p in t["partitions"]] == [0, 1]
    ctx.select(None)
    assert [p["partition"] for t in ctx.topics for p in t["partitions"]] == [0, 2, 1]
    assert ctx.respond([{"topic": "t", "partitions": [_answer(0), _answer(2), _answer(1, hw=5)]}]) == []


def test_session_errors():
    cache = FetchSessionCache(10, EVICTION_MS, Clock())
    sid = _open(cache, 1)
    assert cache.context(_req(sid, 2, []), 12, False).error == errors.E_INVALID_FETCH_SESSION_EPOCH
    assert cache.context(_req(sid + 1, 1, []), 12, False).error == errors.E_FETCH_SESSION_ID_NOT_FOUND
    assert cache.context(_req(sid, 1, []), 13, False).error == errors.E_FETCH_SESSION_TOPIC_ID_ERROR
    assert cache.context(_req(sid, 1, []), 12, False).error == 0
    cache.context(_req(sid, -1, [0]), 12, False)  # closes it
    assert len(cache) == 0


def test_no_slot_means_no_session():
    cache = FetchSessionCache(0, EVICTION_MS, Clock())
    assert _open(cache, 5) == 0


def test_stale_least_recently_used_session_is_evicted_first():
    clock = Clock()
    cache = FetchSessionCache(2, EVICTION_MS, clock)
    a = _open(cache, 50)
    clock.now += 10
    b = _open(cache, 1)
    clock.now += EVICTION_MS + 5  # a is stale (unused for longer than the eviction time); b is not yet
    cache.context(_req(b, 1, []), 12, False)  # b used now
    c = _open(cache, 1)
    assert c and set(cache.sessions) == {b, c} and cache.evictions == 1


def test_bigger_session_evicts_smaller_once_old_enough():
    clock = Clock()
    cache = FetchSessionCache(1, EVICTION_MS, clock)
    small = _open(cache, 2)
    assert _open(cache, 10) == 0  # small is too young to be evicted by anyone but a follower
    clock.now += EVICTION_MS + 1
    cache.context(_req(small, 1, []), 12, False)  # used: not stale, but old enough
    assert _open(cache, 2) == 0  # not more valuable: same size
    big = _open(cache, 10)
    assert big and set(cache.sessions) == {big}


def test_follower_evicts_young_consumer_session_but_not_a_young_follower():
    clock = Clock()
    cache = FetchSessionCache(1, EVICTION_MS, clock)
    consumer = _open(cache, 100)
    follower = _open(cache, 1, privileged=True)
    assert follower and set(cache.sessions) == {follower}
    assert _open(cache, 5, privileged=True) == 0  # young follower sessions are not evictable
    assert _open(cache, 500) == 0 and consumer not in cache.sessions


def test_client_handler_sends_only_changes_and_forgets():
    h = FetchSessionHandler()
    p = {("t", 0): {"partition": 0, "fetch_offset": 0}, ("t", 1): {"partition": 1, "fetch_offset": 0}}
    first = h.build(p)
    assert first["session_epoch"] == 0 and len(first["topics"][0]["partitions"]) == 2
    h.handle_response({"error_code": 0, "session_id": 42})
    same = h.build(dict(p))
    assert (same["session_id"], same["session_epoch"], same["topics"]) == (42, 1, [])
    h.handle_response({"error_code": 0, "session_id": 42})
    nxt = h.build({("t", 1): {"partition": 1, "fetch_offset": 3}})
    assert nxt["session_epoch"] == 2 and nxt["topics"] == [{"topic": "t", "partitions": [
        {"partition": 1, "fetch_offset": 3}]}]
    assert nxt["forgotten_topics_data"] == [{"topic": "t", "partitions": [0]}]
    assert not h.handle_response({"error_code": errors.E_INVALID_FETCH_SESSION_EPOCH, "session_id": 0})
    again = h.build(p)
    assert (again["session_id"], again["session_epoch"]) == (42, 0)  # closes 42, opens a new one
