"""Records deleted by retention before a query read them: failOnDataLoss=true fails the query
with a message saying so; false skips them and reads on from the earliest record left."""

from __future__ import annotations

import shutil
import time

import pytest
from pyspark.errors import PySparkException

from samsa.client.admin import Admin
from samsa.client.types import AlterConfigOp, ConfigResource, TopicPartition
from samsa.embedded import Broker
from spark_helpers import create_topic, produce, run_available_now, source
from waiting import wait_until

OLD = int(time.time() * 1000) - 3_600_000  # an hour ago: older than the topic's retention.ms


@pytest.fixture
def retaining_broker():
    with Broker({"log.retention.check.interval.ms": 200}) as b:
        yield b


def test_records_aged_out_before_they_were_read(spark, retaining_broker, tmp_path):
    bs = retaining_broker.bootstrap_servers
    with Admin({"bootstrap.servers": bs}) as admin:
        # Tiny segments (a 200-byte record never shares one with an older record), kept
        # until retention.ms is set below.
        topic = create_topic(admin, "aging", 1, internal_segment_bytes="300", retention_ms="-1")
        produce(bs, topic, ({"value": b"r%d" % i, "timestamp": OLD + i} for i in range(10)), batch_each=True)
        first: list = []
        checkpoint = tmp_path / "cp"
        run_available_now(source(spark, bs, subscribe=topic, startingOffsets="earliest"), str(checkpoint),
                          lambda df, _id: first.extend(r.offset for r in df.collect()))
        assert sorted(first) == list(range(10))

        # 40 more old records the query has not read, then 5 new ones that retention keeps.
        produce(bs, topic, ({"value": b"r%d" % i, "timestamp": OLD + i} for i in range(10, 50)), batch_each=True)
        produce(bs, topic, ({"value": b"new%d" % i + b"." * 200} for i in range(5)), batch_each=True)
        # Now segments whose newest record is an hour old go at the next retention check.
        admin.incremental_alter_configs({ConfigResource("topic", topic): [AlterConfigOp("retention.ms", "600000")]})
        tp = TopicPartition(topic, 0)
        wait_until(lambda: admin.list_offsets({tp: "earliest"})[tp].offset == 50,
                   what="retention to delete offsets < 50")

    lenient = tmp_path / "cp-lenient"
    shutil.copytree(checkpoint, lenient)  # both runs resume from offset 10

    q = (source(spark, bs, subscribe=topic, failOnDataLoss="true").writeStream.format("noop")
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    with pytest.raises(PySparkException) as failed:
        q.awaitTermination(120)
    message = str(failed.value)
    assert "Cannot fetch offset 10 of aging-0: the earliest offset left is 50" in message
    assert 'set the source option "failOnDataLoss" to "false"' in message

    rest: list = []
    run_available_now(source(spark, bs, subscribe=topic, failOnDataLoss="false"), str(lenient),
                      lambda df, _id: rest.extend((r.offset, r.value) for r in df.collect()))
    assert sorted(rest) == [(50 + i, b"new%d" % i + b"." * 200) for i in range(5)]
