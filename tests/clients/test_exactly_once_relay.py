"""``samsa.pipelines.relay.ExactlyOnceRelay`` against a real broker, without Spark: an
at-least-once writer's replays (records tagged with input offsets written again from an earlier
offset) reach the output once each, also when the relay dies with a transaction open and a new
one takes over (it fences the old, whose copies are aborted, and resumes from the committed
position and marks); so do the copies ``also`` sends to more topics in the same transactions."""

from __future__ import annotations

import threading
import uuid

import pytest

from samsa.client.admin import Admin
from samsa.client.consumer import Consumer
from samsa.client.producer import Producer
from samsa.client.types import NewTopic, TopicPartition
from samsa.pipelines.relay import SOURCE_HEADER, ExactlyOnceRelay, RelayThread, copied_up_to, source_tag


def _write(bootstrap: str, topic: str, inputs: list[tuple[int, int]]) -> None:
    """Outputs of (input partition, input offset), keyed so they spread over the tagged partitions."""
    with Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True}) as p:
        for part, offset in inputs:
            p.send(topic, f"decision {part}:{offset}".encode(), key=f"k{part}-{offset}".encode(),
                   headers=[(SOURCE_HEADER, source_tag(part, offset)), ("kept", b"yes")])
        p.flush()


def _read(bootstrap: str, topic: str) -> list:
    c = Consumer({"bootstrap.servers": bootstrap, "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        tps = [TopicPartition(topic, p) for p in range(2)]
        c.assign(tps)
        c.seek_to_beginning(tps)
        ends = c.end_offsets(tps)
        out = []
        while any(c.position(tp) < end for tp, end in ends.items()):
            out.extend(c.poll(0.5))
        return out
    finally:
        c.close()


def test_replays_and_a_dead_relay_leave_one_copy_each(broker):
    bs = broker.bootstrap
    tagged, output, extra, group = (f"relay-{x}-{uuid.uuid4().hex[:8]}" for x in ("in", "out", "extra", "g"))
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics([NewTopic(tagged, 2), NewTopic(output, 2), NewTopic(extra, 2)])
    config = {"bootstrap.servers": bs}

    def also(value: bytes) -> tuple[str, ...]:  # every third input offset also goes to ``extra``
        return (extra,) if int(value.rsplit(b":", 1)[1]) % 3 == 0 else ()
    _write(bs, tagged, [(p, o) for o in range(100) for p in (0, 1)])
    _write(bs, tagged, [(p, o) for o in range(60, 150) for p in (0, 1)])  # a replay from offset 60

    first = ExactlyOnceRelay(config, tagged, output, group, commit_interval_ms=10_000, also=also)
    first.start()
    first.drain()  # commits: 150 + 150 copied, 40 + 40 left out
    assert (first.copied, first.skipped) == (300, 80)
    # what a restarted writer may leave out: per input partition, up to the lowest of the highest
    # input offsets each tagged partition had (all copied)
    highest: dict[tuple[int, int], int] = {}
    for r in _read(bs, tagged):
        part, offset = map(int, dict(r.headers)[SOURCE_HEADER].split(b":"))
        highest[r.partition, part] = max(highest.get((r.partition, part), -1), offset)
    assert copied_up_to(config, tagged, group) == {p: min(highest[q, p] for q in (0, 1)) for p in (0, 1)}
    _write(bs, tagged, [(p, o) for o in range(140, 200) for p in (0, 1)])  # a replay from 140, then new ones
    first.step(2.0)  # copies some in a transaction it never commits: it "dies"

    second = ExactlyOnceRelay(config, tagged, output, group, also=also)
    second.start()  # fences the first; its open transaction is aborted
    second.drain()
    first.close()
    second.close()

    records = _read(bs, output)
    values = sorted(r.value for r in records)
    assert values == sorted(f"decision {p}:{o}".encode() for o in range(200) for p in (0, 1))
    assert all(dict(r.headers) == {"kept": b"yes"} for r in records)  # the tag is the relay's, not copied
    assert sorted(r.value for r in _read(bs, extra)) == sorted(
        f"decision {p}:{o}".encode() for o in range(0, 200, 3) for p in (0, 1))


def test_a_relay_that_fails_says_so(broker):
    """A record without the tag: the relay stops, calls on_failure (the pipeline stops its
    queries), and stop() raises what went wrong."""
    bs = broker.bootstrap
    tagged, output, group = (f"relay-{x}-{uuid.uuid4().hex[:8]}" for x in ("in", "out", "g"))
    with Admin({"bootstrap.servers": bs}) as admin:
        admin.create_topics([NewTopic(tagged, 1), NewTopic(output, 1)])
    with Producer({"bootstrap.servers": bs}) as p:
        p.send(tagged, b"untagged")
        p.flush()
    relay = ExactlyOnceRelay({"bootstrap.servers": bs}, tagged, output, group)
    relay.start()
    failed = threading.Event()
    thread = RelayThread(relay, on_failure=failed.set)
    thread.start()
    assert failed.wait(30)
    with pytest.raises(ValueError, match="has no samsa.source header"):
        thread.stop()
    relay.close()
