"""Executors: read one offset range of one partition with Samsa's consumer, as Arrow batches
(decoded from the fetched record batches straight into columns: :mod:`samsa.spark.columns`).

A consumer is kept per client config in the Python worker (Spark reuses its workers), so
a micro-batch does not pay for a new connection per task. It is in assign mode with
``auto.offset.reset=none``: it reads only what the driver planned, and a range whose
start retention has already deleted surfaces as an OffsetOutOfRange error, which is data
loss (fail, or skip to the earliest record left, by ``failOnDataLoss``).
"""

from __future__ import annotations

import logging
import time
from typing import Iterator

import pyarrow as pa

from samsa.client.consumer import Consumer
from samsa.client.types import TopicPartition
from samsa.protocol import errors
from samsa.spark.client_cache import ClientCache
from samsa.spark.offsets import OffsetRange, report_data_loss
from samsa.spark.options import SourceOptions
from samsa.spark.columns import batches_to_arrow
from samsa.spark.schema import arrow_schema

log = logging.getLogger("samsa.spark")

_consumers: ClientCache[Consumer] = ClientCache(Consumer, lambda c: c.close(timeout=1.0))


def read_range(opts: SourceOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    """The records of ``[r.start, r.end)``; gaps (compaction, transaction markers) are skipped."""
    config = opts.consumer_config()
    try:
        yield from _read(_consumers.get(config), opts, r)
    except BaseException:
        _consumers.drop(config)  # its state is unknown now: the next task starts a fresh one
        raise


def _with_decoded(rows: pa.RecordBatch, opts: SourceOptions) -> pa.RecordBatch:
    from samsa.spark.avro_values import COLUMN, decode_column
    decoded = decode_column(rows.column(1), opts.registry_url or "", opts.value_schema or "")
    return pa.RecordBatch.from_arrays(list(rows.columns) + [decoded], names=list(rows.schema.names) + [COLUMN])


def _read(consumer: Consumer, opts: SourceOptions, r: OffsetRange) -> Iterator[pa.RecordBatch]:
    tp = TopicPartition(r.topic, r.partition)
    schema = arrow_schema(opts.include_headers)
    consumer.assign([tp])
    consumer.seek(tp, r.start)
    position = r.start
    idle_since: float | None = None
    poll_timeout = opts.poll_timeout_ms / 1000
    while position < r.end:
        try:
            batches = consumer.poll_batches(0.5)
        except errors.OffsetOutOfRangeError:
            position = _out_of_range(consumer, opts, tp, position, r.end)
            continue
        if batches:
            idle_since = None
            rows = batches_to_arrow(batches, r.topic, r.partition, position, r.end, schema)
            position = max(position, batches[-1].next_offset)
            if rows.num_rows:
                yield _with_decoded(rows, opts) if opts.value_schema else rows
            continue
        # Nothing came: past a gap at the end of the range, or the log is shorter than planned?
        position = max(position, consumer.position(tp))
        if position >= r.end:
            break
        end = consumer.end_offsets([tp])[tp]
        if end <= position:
            report_data_loss(opts.fail_on_data_loss,
                             f"Cannot fetch offsets {position} to {r.end} of {tp}: the partition ends at {end}")
            break
        now = time.monotonic()
        idle_since = idle_since or now
        if now - idle_since > poll_timeout:
            raise TimeoutError(f"Cannot fetch record for offset {position} of {tp} in {opts.poll_timeout_ms} "
                               "milliseconds (kafkaConsumer.pollTimeoutMs)")
    consumer.assign([])


def _out_of_range(consumer: Consumer, opts: SourceOptions, tp: TopicPartition, position: int, end: int) -> int:
    """The offset to go on from after an OffsetOutOfRange at ``position`` (or raise DataLossError)."""
    earliest = consumer.beginning_offsets([tp])[tp]
    if earliest <= position:  # not retention: the log is shorter than the range (a recreated topic?)
        latest = consumer.end_offsets([tp])[tp]
        report_data_loss(opts.fail_on_data_loss,
                         f"Cannot fetch offset {position} of {tp}: the partition holds offsets {earliest} to {latest}")
        return end
    report_data_loss(opts.fail_on_data_loss,
                     f"Cannot fetch offset {position} of {tp}: the earliest offset left is {earliest}, "
                     f"{min(earliest, end) - position} records were deleted before they were read")
    if earliest >= end:
        return end
    consumer.seek(tp, earliest)
    return earliest
