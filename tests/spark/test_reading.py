"""Executors' reads (samsa.spark.reading) against a real broker, without Spark."""

from __future__ import annotations

from samsa.client.producer import Producer
from samsa.client.types import NewTopic
from samsa.spark.offsets import OffsetRange
from samsa.spark.options import parse_source
from samsa.spark.reading import read_range


def options(broker, **extra: str):
    return parse_source({"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": "reads", **extra},
                        streaming=False)


def test_executor_consumers_do_not_park_fetches_at_the_end_of_a_range(broker):
    # The fetch sent after a range's last records would wait fetch.max.wait.ms (500) at the
    # broker, and the next task reusing the consumer would wait for it.
    assert options(broker).consumer_config()["fetch.max.wait.ms"] == 10
    assert options(broker, **{"kafka.fetch.max.wait.ms": "200"}).consumer_config()["fetch.max.wait.ms"] == "200"


def test_a_reused_consumer_reads_ranges_back_to_back(broker, admin):
    admin.create_topics([NewTopic("reads", 1)])
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "linger.ms": 5}) as p:
        for i in range(300):
            p.send("reads", f"v{i}".encode(), key=str(i).encode())
    opts = options(broker)

    def offsets(start: int, end: int) -> list[int]:
        return [o for batch in read_range(opts, OffsetRange("reads", 0, start, end)) for o in batch["offset"].to_pylist()]

    assert offsets(0, 100) == list(range(100))
    assert offsets(100, 300) == list(range(100, 300))  # to the log's end
    assert offsets(250, 300) == list(range(250, 300))  # back, after a fetch at the end
    assert offsets(0, 300) == list(range(300))
