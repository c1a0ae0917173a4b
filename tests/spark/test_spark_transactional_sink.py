"""The ``samsa`` sink with exactlyOnce=true: each task's rows in a transaction, and a micro-batch
run again (a crash after the sink wrote, before Spark committed the batch) writes nothing twice."""

from __future__ import annotations

from pathlib import Path

from spark_helpers import create_topic, produce, read_committed, source


def run_query(df, bootstrap: str, topic: str, checkpoint: Path, exactly_once: bool) -> None:
    q = (df.writeStream.format("samsa").option("kafka.bootstrap.servers", bootstrap).option("topic", topic)
         .option("exactlyOnce", str(exactly_once).lower()).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()


def forget_last_commit(checkpoint: Path) -> int:
    """As if the driver died after the sink wrote the last micro-batch, before Spark recorded it."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    (checkpoint / "commits" / str(last)).unlink()
    (checkpoint / "commits" / f".{last}.crc").unlink(missing_ok=True)
    return last


def test_a_micro_batch_run_again_writes_nothing_twice(spark, broker, admin, tmp_path):
    bs = broker.bootstrap_servers
    src = create_topic(admin, "txsink-in", 2)
    produce(bs, src, ({"value": b"%d" % i, "key": b"%d" % (i % 5), "partition": i % 2} for i in range(120)))
    expected = sorted(b"%d" % i for i in range(120))
    df = source(spark, bs, subscribe=src, startingOffsets="earliest", maxOffsetsPerTrigger="50").select("key", "value")
    for exactly_once in (False, True):
        dst = create_topic(admin, f"txsink-out-{str(exactly_once).lower()}", 2)
        cp = tmp_path / f"cp-{exactly_once}"
        run_query(df, bs, dst, cp, exactly_once)
        assert sorted(m.value() for m in read_committed(bs, dst, 2)) == expected
        forget_last_commit(cp)
        run_query(df, bs, dst, cp, exactly_once)  # Spark runs the last micro-batch again
        got = sorted(m.value() for m in read_committed(bs, dst, 2))
        if exactly_once:
            assert got == expected
        else:
            assert len(got) > len(expected)  # at-least-once: the replayed micro-batch is written twice
