"""The broker's metric counters: request timings fold into Kafka's five RequestMetrics times."""

from __future__ import annotations

import asyncio

from samsa.server.metrics.counters import BUCKETS_MS, TIME_NAMES, BrokerTopicStats, LoopBusy, RequestTimes


def test_request_times_fold_into_histograms():
    times = RequestTimes()
    # arrived 0, handled from 0.001 s, local work done at 0.003, parked until 0.010, encoded at 0.0105
    times.record(0, 9, 0.0, 0.001, 0.003, 0.010, 0.0105)
    times.record(0, 9, 1.0, 1.0, 1.0002, 1.0002, 1.0003)
    assert times.pending and not times.requests
    times.fold()
    assert not times.pending and times.requests == {(0, 9): 2}
    expected_first = dict(zip(TIME_NAMES, (1.0, 2.0, 7.0, 0.5, 10.5)))
    for name in TIME_NAMES:
        h = times.histograms[0, name]
        assert sum(h.counts) == 2
        assert abs(h.total - expected_first[name] - {"RequestQueueTimeMs": 0, "LocalTimeMs": 0.2, "RemoteTimeMs": 0,
                                                     "ResponseSendTimeMs": 0.1, "TotalTimeMs": 0.3}[name]) < 1e-6
    total = times.histograms[0, "TotalTimeMs"]
    assert total.counts[BUCKETS_MS.index(25)] == 1  # 10.5 ms: in (10, 25]
    assert total.counts[BUCKETS_MS.index(0.5)] == 1  # 0.3 ms: in (0.25, 0.5]


def test_topic_stats_count_per_topic_and_in_total():
    stats = BrokerTopicStats()
    stats.produced("a", 10, 1000)
    stats.produced("b", 1, 100)
    stats.produce_failed("a", 50)
    stats.fetched([{"topic": "a", "partitions": [{"error_code": 0, "records": b"x" * 30},
                                                 {"error_code": 1, "records": b""}]},
                   {"topic": None, "partitions": [{"error_code": 100, "records": b""}]}], follower=False)
    stats.fetched([{"topic": "a", "partitions": [{"error_code": 0, "records": b"x" * 7}]}], follower=True)
    a, total = stats.topics["a"], stats.all
    assert (a.messages_in, a.bytes_in, a.failed_produce, a.bytes_rejected, a.total_produce) == (10, 1000, 1, 50, 2)
    assert (a.bytes_out, a.failed_fetch, a.total_fetch, a.replication_bytes_out) == (30, 1, 3, 7)
    assert (total.messages_in, total.bytes_in, total.bytes_out, total.failed_fetch) == (11, 1100, 30, 2)
    stats.forget("a")
    assert "a" not in stats.topics and total.messages_in == 11


def test_loop_busy_measures_time_outside_select():
    busy = LoopBusy(window_s=0.05)
    loop = asyncio.new_event_loop()
    try:
        assert busy.install(loop)

        async def idle() -> None:
            await asyncio.sleep(0.2)
        loop.run_until_complete(idle())
        assert busy.ratio < 0.5
        assert busy.idle_s > 0.1
    finally:
        loop.close()
