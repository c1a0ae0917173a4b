"""Exactly-once output to a Samsa topic through ``foreachBatch``.

The ``samsa`` sink is at-least-once, like Spark's Kafka sink: when a query dies after
writing some of a micro-batch but before Spark committed it, the restarted query runs the
micro-batch again (same id, same rows: its input offsets and state are in the checkpoint)
and its records are written twice. :class:`ExactlyOnceWriter` prevents that::

    writer = ExactlyOnceWriter("localhost:9092", "decisions", "/data/checkpoints/decisions-sink")
    df.writeStream.foreachBatch(writer).option("checkpointLocation", ...).start()

Before writing micro-batch N it notes the topic's end offsets in ``state_dir``, and tags
every record with a header naming the writer and N. Finding that note again means N was
(perhaps partly) written before: the committed records tagged N after those offsets are read
back and the same rows are left out, counted as a multiset of (key, value). One query writes
through one ``state_dir``; the topic must exist.

Each task of the write sends its rows in a Kafka transaction (the samsa sink's
``exactlyOnce``): a task Spark runs again inside the same micro-batch (its executor lost, a
broker gone mid-write) fences the attempt before it, whose records are aborted, and a task
whose transaction was committed writes nothing again. So readers of the topic use
``isolation.level=read_committed``. A micro-batch run again after a crash writes under
transactional ids of its own (the rows left out above decide what it writes, not the tasks'
progress notes).

``foreachBatch`` also serves update-mode outputs, which Python sinks do not take.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from samsa.client.admin import Admin
from samsa.client.types import TopicPartition

HEADER = "samsa.spark.batch"
KEEP_NOTES = 3


def write_atomically(path: Path, text: str) -> None:
    """``text`` in ``path``, whole or not at all (written aside, synced, renamed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def stored_id(path: Path) -> str:
    """A random id kept in ``path``: made the first time, the same ever after (across restarts).
    Two processes making it at once get the same one: the first link wins."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        with open(tmp, "w") as f:
            f.write(uuid.uuid4().hex)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # fails if another process made it first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


class ExactlyOnceWriter:
    def __init__(self, bootstrap_servers: str, topic: str, state_dir: str | os.PathLike,
                 options: dict[str, str] | None = None):
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.dir = Path(state_dir)
        self.options = dict(options or {})  # more kafka.* options for the sink and the read-back
        self._admin: Admin | None = None  # foreachBatch runs on the driver: one client for every micro-batch

    # ---------------------------------------------------------------- notes on disk

    def _writer_id(self) -> str:
        return stored_id(self.dir / "writer-id")

    def _note(self, batch_id: int) -> Path:
        return self.dir / f"batch-{batch_id}.json"

    def _forget_before(self, batch_id: int) -> None:
        for path in self.dir.glob("batch-*.json"):
            if int(path.stem.split("-")[1]) < batch_id - KEEP_NOTES:
                path.unlink(missing_ok=True)

    # ---------------------------------------------------------------- the topic

    def _end_offsets(self) -> dict[str, int]:
        if self._admin is None:
            config = {k[6:]: v for k, v in self.options.items() if k.startswith("kafka.")}
            self._admin = Admin({**config, "bootstrap.servers": self.bootstrap_servers})
        try:
            parts = self._admin.describe_topics([self.topic])[self.topic].partitions
            ends = self._admin.list_offsets({TopicPartition(self.topic, p.partition): "latest" for p in parts})
        except BaseException:
            self.close()
            raise
        return {str(tp.partition): info.offset for tp, info in ends.items()}

    def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            admin.close()

    def _already_written(self, df: DataFrame, since: dict[str, int], tag: bytes) -> list[Any]:
        """(key, value, count) of the records tagged ``tag`` written after ``since``."""
        partitions = [int(p) for p in self._end_offsets()]
        start = {str(p): since.get(str(p), -2) for p in partitions}  # -2: a partition added since: all of it
        reader = (df.sparkSession.read.format("samsa").option("kafka.bootstrap.servers", self.bootstrap_servers)
                  .option("assign", json.dumps({self.topic: partitions}))
                  .option("startingOffsets", json.dumps({self.topic: start})).option("includeHeaders", "true"))
        for k, v in self.options.items():
            reader = reader.option(k, v)
        reader = reader.option("kafka.isolation.level", "read_committed")  # aborted attempts were not written
        tagged = F.exists("headers", lambda h: (h["key"] == F.lit(HEADER)) & (h["value"] == F.lit(tag)))
        return reader.load().where(tagged).groupBy("key", "value").count().collect()

    # ---------------------------------------------------------------- foreachBatch

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        tag = f"{self._writer_id()}:{batch_id}".encode()
        note = self._note(batch_id)
        out = df.withColumn("value", F.col("value").cast("binary"))
        out = out.withColumn("key", F.col("key").cast("binary") if "key" in df.columns else F.lit(None).cast("binary"))
        prefix = f"samsa-once-{self._writer_id()}"
        if note.exists():
            written = self._already_written(df, json.loads(note.read_text()), tag)
            if written:
                out = self._leave_out(out, written)
            # The first run's tasks may have committed notes for N (their rows are in ``written``):
            # fresh ids, so that no task of this run skips rows as "done". Rare, so few ids.
            prefix = f"{prefix}-{batch_id}-{uuid.uuid4().hex[:8]}"
        else:
            write_atomically(note, json.dumps(self._end_offsets()))
        mark = F.array(F.struct(F.lit(HEADER).alias("key"), F.lit(tag).alias("value")))
        out = out.withColumn("headers", F.concat("headers", mark) if "headers" in df.columns else mark)
        writer = out.write.format("samsa").option("kafka.bootstrap.servers", self.bootstrap_servers)
        for k, v in self.options.items():
            writer = writer.option(k, v)
        writer.option("topic", self.topic).option("exactlyOnce", "true").option("transactionalIdPrefix", prefix) \
            .mode("append").save()
        self._forget_before(batch_id)

    @staticmethod
    def _leave_out(out: DataFrame, written: list[Any]) -> DataFrame:
        """Drop, for each (key, value), as many rows as were written already."""
        done = out.sparkSession.createDataFrame([(r.key, r.value, r["count"]) for r in written],
                                                "_k binary, _v binary, _written long")
        numbered = out.withColumn("_n", F.row_number().over(Window.partitionBy("key", "value").orderBy(F.lit(1))))
        joined = numbered.join(done, numbered["key"].eqNullSafe(done["_k"]) & numbered["value"].eqNullSafe(done["_v"]),
                               "left")
        return joined.where(F.col("_n") > F.coalesce(F.col("_written"), F.lit(0))).drop("_n", "_k", "_v", "_written")
