"""Samsa's Spark jar (samsa/spark/jvm): built from the sources beside it, and its velocity
processor in Spark's state store, against the rule worked out in Python."""

from __future__ import annotations

import os

from samsa.pipelines import payments
from samsa.spark import jvm


def test_the_shipped_jar_is_built_from_its_sources(tmp_path):
    rebuilt = jvm.build(tmp_path / "rebuilt.jar")
    assert rebuilt.read_bytes() == jvm.JAR.read_bytes(), \
        "samsa/spark/jvm/samsa-spark.jar is stale: python -m samsa.spark.jvm build, and commit it"


def test_velocity_in_micro_batches_keeps_each_cards_own_window(spark, tmp_path):
    """The velocity processor across micro-batches (one file each): a card's transactions counted
    in its own window however far another card's partition runs ahead (a broker's failover), out
    of order within a batch counted in event-time order, old times leaving the window."""
    inbox = tmp_path / "in"
    inbox.mkdir()
    batches = [[("a", i * 1000) for i in range(5)],  # five in a minute: none over
               [("b", 75_000)],                      # b's partition runs ahead
               [("a", 10_000)],                      # a's sixth within 60 s: over
               [("a", 70_000)],                      # 60 s later: a's old times left its window
               [("c", 9_000), ("c", 1_000), ("c", 5_000), ("c", 3_000), ("c", 7_000), ("c", 8_000)]]
    for i, rows in enumerate(batches):
        (inbox / f"{i:02d}.json").write_text("".join(f'{{"card": "{c}", "ms": {t}}}\n' for c, t in rows))
        os.utime(inbox / f"{i:02d}.json", (1_000_000 + i, 1_000_000 + i))  # the file source reads oldest first
    txs = spark.readStream.schema("card string, ms long").option("maxFilesPerTrigger", 1).json(str(inbox))
    # as the payments pipeline runs it: else availableNow never ends
    [(key, value)] = payments.QUERY_CONF["payments-decide"].items()
    spark.conf.set(key, value)
    query = (jvm.velocity(txs, "card", "ms", 5, 60_000, 600_000).writeStream.outputMode("update").format("memory").queryName("velocity_out")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    spark.conf.unset(key)  # the query has its own copy
    query.awaitTermination(300)
    assert query.exception() is None
    seen = [(r.card, r.ms, r.velocity) for r in spark.table("velocity_out").collect()]
    got = {(c, t): v for c, t, v in seen}
    assert len(got) == len(seen) == sum(map(len, batches))
    assert [got[("a", i * 1000)] for i in range(5)] == [False] * 5
    assert got[("b", 75_000)] is False
    assert got[("a", 10_000)] is True
    assert got[("a", 70_000)] is False
    assert sorted((t, v) for (c, t), v in got.items() if c == "c") == [
        (1_000, False), (3_000, False), (5_000, False), (7_000, False), (8_000, False), (9_000, True)]
