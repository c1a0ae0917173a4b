"""The activity pipeline on generated events, its outputs checked record by record against
counts computed here from the same events."""

from __future__ import annotations

import base64
import itertools
import json
import random
from datetime import timezone

import pytest

from samsa.client.producer import Producer
from samsa.pipelines import activity
from samsa.pipelines.common import PipelineConfig, ensure_topics
from spark_helpers import activity_windows, ms, read_committed, read_topic

START = 1_767_225_600_000  # 2026-01-01T00:00:00Z

BAD = [  # (value, the reason the dead-letter record must give)
    (b'{"event_id": "b1", "type": "click", "user_id": "u-1", "page": "/home", "ts"', "malformed JSON"),
    (b'["not", "an", "object"]', "not a JSON object"),
    (b'{"event_id": "b3", "type": "click", "page": "/home", "ts": "2026-01-01T00:00:01Z"}',
     "missing or bad field 'user_id' (want string)"),
    (b'{"event_id": "b4", "type": "hover", "user_id": "u-1", "page": "/home", "ts": "2026-01-01T00:00:01Z"}',
     "unknown event type 'hover'"),
    (b'{"event_id": "b5", "type": "click", "user_id": "u-1", "page": "home", "ts": "2026-01-01T00:00:01Z"}',
     "field 'page' is not a path"),
    (b'{"event_id": "b6", "type": "click", "user_id": "u-1", "page": "/home", "ts": "yesterday"}',
     "missing or bad field 'ts' (want timestamp)"),
    (b"\xff\xfe not even text", "malformed JSON"),
]


@pytest.mark.parametrize("source", ["samsa", "kafka"])  # kafka: Spark's own connector reads Samsa
def test_activity_counts_and_dead_letters(spark, fresh_broker, tmp_path, source):
    bs = fresh_broker.bootstrap_servers
    cfg = PipelineConfig(bootstrap_servers=bs, state_dir=tmp_path, available_now=True, max_offsets_per_trigger=800,
                         source=source)
    ensure_topics(cfg, [activity.EVENTS, activity.DEAD_LETTERS, activity.COUNTS])
    # 1,600 events 300 ms apart (8 minutes), each up to 20 s late: out of order, within the watermark.
    rng = random.Random(7)
    ticks = itertools.count(START, 300)
    clock = lambda: next(ticks) - rng.randrange(20_000)  # noqa: E731
    good = list(itertools.islice(activity.generate(seed=7, clock=clock, malformed=0.0), 1600))
    records = list(good)
    for i, (value, _) in enumerate(BAD):
        records.insert(100 + 200 * i, (b"bad", value))
    with Producer({"bootstrap.servers": bs}) as p:
        sent = [p.send(activity.EVENTS, v, key=k, partition=0) for k, v in records]
        p.flush()
    offsets = {records[i][1]: f.result().offset for i, f in enumerate(sent)}

    activity.run(spark, cfg)

    # Dead letters: each bad event once, with its reason and where it was.
    dead = [json.loads(m.value()) for m in read_topic(bs, activity.DEAD_LETTERS, partitions=2)]
    assert sorted((base64.b64decode(d["value_base64"]), d["reason"]) for d in dead) == sorted(BAD)
    for d in dead:
        original = base64.b64decode(d["value_base64"])
        assert (d["source_topic"], d["source_partition"], d["source_offset"]) == (activity.EVENTS, 0, offsets[original])

    want = activity_windows([json.loads(v) for _, v in good])
    closed = set(want)
    assert len(closed) > 300

    live = read_committed(bs, activity.COUNTS, partitions=2)  # written in transactions
    got = {}
    for m in live:
        c = json.loads(m.value())
        k = (ms(c["window_start"]), c["dimension"], c["key"])
        assert k not in got, f"window {k} written twice"
        assert m.key() == f"{c['dimension']}:{c['key']}".encode()
        assert ms(c["window_end"]) - ms(c["window_start"]) == 60_000
        got[k] = (c["events"], c["page_views"], c["searches"], c["clicks"])
    assert set(got) == closed
    for k, counts in got.items():
        assert counts == want[k], k

    # The warehouse holds the same counts, partitioned by date.
    table = spark.read.parquet(cfg.warehouse(activity.TABLE))
    rows = table.collect()
    assert {(int(r.window_start.replace(tzinfo=timezone.utc).timestamp() * 1000), r.dimension, r.key):
            (r.events, r.page_views, r.searches, r.clicks) for r in rows} == got
    assert len(rows) == len(got)
    assert all(r.date == r.window_start.date() for r in rows)
    dates = {str(r.date) for r in rows}
    assert dates == {"2025-12-31", "2026-01-01"}  # the first events are up to 20 s before midnight
    assert {p.name for p in (tmp_path / "warehouse" / activity.TABLE).glob("date=*")} == {f"date={d}" for d in dates}
