"""Writing a DataFrame to Samsa: the columns of Spark's Kafka sink, sent with Samsa's producer.

Each task sends its rows through an idempotent producer (``acks=all``), flushes, and fails
if any record failed, which fails the micro-batch (or the batch write). As with Spark's
Kafka sink this is at-least-once: a micro-batch that is run again after a failure writes
its records again.

With ``exactlyOnce=true`` each task writes its rows in one Kafka transaction instead, with
the transactional id ``<prefix>-<task partition>`` (prefix: ``transactionalIdPrefix``, by
default ``samsa-spark-<query id>``, which the checkpoint keeps). In the same transaction it
commits, as consumer group ``<transactional id>``, an "offset" of micro-batch id + 1 on
partition 0 of the topic it writes: a progress note that is committed exactly when the rows
are. A task of a micro-batch run again (the query restarted from its checkpoint) first
starts its producer, which fences any older one with the id and waits for its last
transaction to be decided, then reads the note: a task whose rows were committed writes
nothing. Readers use ``isolation.level=read_committed``. As with
:class:`samsa.spark.exactly_once.ExactlyOnceWriter`, a micro-batch run again must give each
task the same rows (Spark's replay from a checkpoint does).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

from samsa.client.admin import Admin
from samsa.client.producer import Producer
from samsa.client.types import OffsetAndMetadata, TopicPartition
from samsa.spark.client_cache import ClientCache
from samsa.spark.options import OptionError, SinkOptions
from samsa.spark.schema import HEADER


@dataclass(frozen=True)
class Columns:
    """Where the sink finds what it writes."""

    value: str
    key: str | None = None
    topic: str | None = None
    partition: str | None = None
    headers: str | None = None


def check_input(schema: StructType, opts: SinkOptions) -> Columns:
    """Spark's Kafka sink rules for the input columns (names are case-insensitive)."""
    fields = {f.name.lower(): f for f in schema.fields}

    def text_or_bytes(name: str, what: str) -> str | None:
        f = fields.get(name)
        if f is None:
            return None
        if not isinstance(f.dataType, (StringType, BinaryType)):
            raise OptionError(f"{what} attribute type must be a string or binary")
        return f.name

    topic = fields.get("topic")
    if opts.topic is None:
        if topic is None:
            raise OptionError("topic option required when no 'topic' attribute is present. Use the topic option "
                              "for setting a topic.")
        if not isinstance(topic.dataType, StringType):
            raise OptionError(f"Topic type must be a string, got {topic.dataType.simpleString()}")
    value = text_or_bytes("value", "value")
    if value is None:
        raise OptionError("Required attribute 'value' not found")
    key = text_or_bytes("key", "key")
    partition = fields.get("partition")
    if partition is not None and not isinstance(partition.dataType, IntegerType):
        raise OptionError("partition attribute type must be an int")
    headers = fields.get("headers")
    if headers is not None and headers.dataType != ArrayType(HEADER):
        if not (isinstance(headers.dataType, ArrayType) and isinstance(headers.dataType.elementType, StructType)
                and [f.name for f in headers.dataType.elementType.fields] == ["key", "value"]):
            raise OptionError("headers attribute type must be array<struct<key:string,value:binary>>")
    return Columns(value, key, None if opts.topic is not None else topic.name,  # type: ignore[union-attr]
                   partition.name if partition is not None else None, headers.name if headers is not None else None)


@dataclass
class Written(WriterCommitMessage):
    records: int


_producers: ClientCache[Producer] = ClientCache(Producer, lambda p: p.close(1))
_admins: ClientCache[Admin] = ClientCache(Admin, lambda a: a.close())


def _bytes(v: Any) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def _rows(cols: Columns, opts: SinkOptions, batch: pa.RecordBatch) -> Iterator[tuple]:
    """(topic, key, value, partition, headers) of each row."""
    n = batch.num_rows
    values = batch.column(cols.value).to_pylist()
    keys = batch.column(cols.key).to_pylist() if cols.key else [None] * n
    topics = batch.column(cols.topic).to_pylist() if cols.topic else [opts.topic] * n
    parts = batch.column(cols.partition).to_pylist() if cols.partition else [None] * n
    headers = batch.column(cols.headers).to_pylist() if cols.headers else None
    for i in range(n):
        topic = topics[i]
        if topic is None:
            raise ValueError("null topic present in the data. Use the topic option for setting a topic.")
        hdrs = [(h["key"], _bytes(h["value"])) for h in headers[i] or ()] if headers else None
        yield topic, _bytes(keys[i]), _bytes(values[i]), parts[i], hdrs


def write_transactionally(opts: SinkOptions, cols: Columns, batches: Iterator[pa.RecordBatch]) -> int:
    """The task's rows in one transaction, with its progress note (see the module docstring)."""
    task = TaskContext.get()
    partition = task.partitionId() if task is not None else 0
    query = task.getLocalProperty("sql.streaming.queryId") if task is not None else None
    batch_id = task.getLocalProperty("streaming.sql.batchId") if task is not None else None
    prefix = opts.transactional_id_prefix or f"samsa-spark-{query or 'batch'}"
    txn_id = f"{prefix}-{partition}"
    config = {**opts.producer_config(), "transactional.id": txn_id}
    producer = _producers.get(config)
    producer.init_transactions()  # fences an older producer of the id; its last transaction is decided
    rows = (row for batch in batches for row in _rows(cols, opts, batch))
    first = next(rows, None)
    if first is None:
        return 0
    note = TopicPartition(opts.topic or first[0], 0)
    if batch_id is not None:
        done = _admins.get(opts.admin_config()).list_consumer_group_offsets(txn_id, [note]).get(note)
        if done is not None and done.offset > int(batch_id):
            for _ in rows:  # written and committed by an earlier run of this micro-batch
                pass
            return 0
    count = 0
    producer.begin_transaction()
    try:
        for topic, key, value, part, hdrs in itertools.chain([first], rows):
            producer.send(topic, value, key=key, partition=part, headers=hdrs)
            count += 1
        if batch_id is not None:
            producer.send_offsets_to_transaction({note: OffsetAndMetadata(int(batch_id) + 1)}, txn_id)
        producer.commit_transaction()
    except BaseException:
        try:
            producer.abort_transaction()
        except Exception:  # noqa: BLE001 - the producer may be fenced: its transaction is aborted anyway
            _producers.drop(config)  # fenced: a state it cannot leave; the next task starts anew
        raise
    return count


def write_batches(opts: SinkOptions, cols: Columns, batches: Iterator[pa.RecordBatch]) -> int:
    """Send every row; raise if any record could not be written."""
    if opts.exactly_once:
        return write_transactionally(opts, cols, batches)
    producer = _producers.get(opts.producer_config())
    failures: list[BaseException] = []

    def delivered(_md: Any, error: BaseException | None) -> None:
        if error is not None:
            failures.append(error)

    count = 0
    for batch in batches:
        for topic, key, value, part, hdrs in _rows(cols, opts, batch):
            producer.send(topic, value, key=key, partition=part, headers=hdrs, on_delivery=delivered)
        count += batch.num_rows
        if failures:
            break
    producer.flush()
    if failures:
        raise RuntimeError(f"Writing to Samsa at {opts.bootstrap_servers} failed for {len(failures)} records: "
                           f"{failures[0]}")
    return count


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, cols: Columns):
        self.opts, self.cols = opts, cols

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return Written(write_batches(self.opts, self.cols, iterator))


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, cols: Columns):
        self.opts, self.cols = opts, cols

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Written:
        return Written(write_batches(self.opts, self.cols, iterator))

    def commit(self, messages: list, batchId: int) -> None:
        pass  # every record was acknowledged (acks=all), or its transaction committed, before its task finished

    def abort(self, messages: list, batchId: int) -> None:
        pass  # records of the tasks that finished stay written: at-least-once (exactlyOnce: skipped when run again)
