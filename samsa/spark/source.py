"""The ``samsa`` data source: batch and streaming reads, batch and streaming writes.

Reads plan one input partition per topic-partition offset range (split further for
``minPartitions``); executors read them in parallel (:mod:`samsa.spark.reading`). A
streaming read's offsets are Spark's Kafka offset JSON, kept in the query's checkpoint.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from samsa.spark import offsets as off
from samsa.spark.options import OptionError, SourceOptions, parse_sink, parse_source
from samsa.spark.reading import read_range
from samsa.spark.schema import kafka_schema

log = logging.getLogger("samsa.spark")


def _schema(opts: SourceOptions) -> tuple[StructType, str | None]:
    """The source's columns: Spark's Kafka columns, plus ``decodedValue`` with valueFormat=avro
    (and the Avro schema it is decoded to)."""
    schema = kafka_schema(opts.include_headers)
    if opts.value_format != "avro":
        return schema, None
    from samsa.spark.avro_values import AvroOptionError, fetch_schema, value_field
    try:
        text = fetch_schema(opts.registry_url or "", opts.value_subject or "", opts.value_version)
        return StructType(schema.fields + [value_field(text)]), text
    except AvroOptionError as e:
        raise OptionError(str(e)) from None


class SamsaDataSource(DataSource):
    """``spark.readStream.format("samsa")``, with the options of Spark's Kafka source."""

    @classmethod
    def name(cls) -> str:
        return "samsa"

    def schema(self) -> StructType:
        """Called by load(): bad options fail there, as with Spark's Kafka source."""
        return _schema(parse_source(dict(self.options), streaming=None))[0]

    def _source(self, schema: StructType, streaming: bool) -> SourceOptions:
        opts = parse_source(dict(self.options), streaming=streaming)
        expected, value_schema = _schema(opts)
        if schema != expected:
            if value_schema is not None:
                raise OptionError(f"The value schema of {opts.value_subject} changed since the query was defined: "
                                  "define it again (load()) to read with the new one")
            raise OptionError("Kafka source has a fixed schema and cannot be set with a custom one")
        return dataclasses.replace(opts, value_schema=value_schema) if value_schema else opts

    def reader(self, schema: StructType) -> "BatchReader":
        return BatchReader(self._source(schema, streaming=False))

    def streamReader(self, schema: StructType) -> "StreamReader":
        return StreamReader(self._source(schema, streaming=True))

    def writer(self, schema: StructType, overwrite: bool):
        from samsa.spark.sink import BatchWriter, check_input
        return BatchWriter(parse_sink(dict(self.options)), check_input(schema, parse_sink(dict(self.options))))

    def streamWriter(self, schema: StructType, overwrite: bool):
        from samsa.spark.sink import StreamWriter, check_input
        return StreamWriter(parse_sink(dict(self.options)), check_input(schema, parse_sink(dict(self.options))))


class _Reads:
    """What batch and stream readers share: the options, and read() on executors."""

    opts: SourceOptions
    _offsets: off.OffsetReader | None

    @property
    def offsets(self) -> off.OffsetReader:
        if self._offsets is None:
            self._offsets = off.OffsetReader(self.opts)
        return self._offsets

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_offsets"] = None  # clients hold threads and sockets: each process opens its own
        return state

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, off.OffsetRange)
        return read_range(self.opts, partition)


class BatchReader(_Reads, DataSourceReader):
    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._offsets = None

    def partitions(self) -> Sequence[InputPartition]:
        try:
            tps = self.offsets.partitions()
            start = self.offsets.resolve(self.opts.starting, tps, is_start=True)
            end = self.offsets.resolve(self.opts.ending, tps, is_start=False)
        finally:
            self.offsets.close()
        ranges = []
        for tp in tps:
            if end[tp] < start[tp]:
                raise ValueError(f"The ending offset {end[tp]} of {tp[0]}-{tp[1]} is before its starting offset "
                                 f"{start[tp]}")
            ranges.append(off.OffsetRange(tp[0], tp[1], start[tp], end[tp]))
        planned = off.plan_ranges(ranges, self.opts.min_partitions)
        return planned or [off.OffsetRange("", -1, 0, 0)]  # Spark wants at least one partition

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, off.OffsetRange)
        if partition.end <= partition.start:
            return iter(())
        return read_range(self.opts, partition)


class StreamReader(_Reads, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches between offsets; new partitions are read from their start."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._offsets = None
        self._target: dict[off.TP, int] | None = None  # Trigger.AvailableNow: where to stop

    def initialOffset(self) -> dict:
        tps = self.offsets.partitions()
        return off.to_json(self.offsets.resolve(self.opts.starting, tps, is_start=True))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.offsets.partitions()
        self._target = self.offsets.latest(tps)

    def _latest(self) -> dict[off.TP, int]:
        if self._target is not None:
            return dict(self._target)
        return self.offsets.latest(self.offsets.partitions())

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = off.from_json(start)
        latest = self._latest()
        new = [tp for tp in latest if tp not in begin]
        if new:
            begin.update(self.offsets.earliest(new))
        if isinstance(limit, ReadMaxRows):
            latest = off.rate_limit(begin, latest, limit.max_rows)
        return off.to_json(latest)

    def reportLatestOffset(self) -> dict | None:
        return off.to_json(self._latest())

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, until = off.from_json(start), off.from_json(end)
        new = [tp for tp in until if tp not in begin]
        new_start = self.offsets.earliest(new) if new else {}
        ranges = off.batch_ranges(begin, until, new_start, self.opts.fail_on_data_loss)
        return off.plan_ranges(ranges, self.opts.min_partitions)

    def commit(self, end: dict) -> None:
        pass  # nothing to release: the checkpoint holds the offsets (and it is not called after availableNow's last batch)

    def stop(self) -> None:
        if self._offsets is not None:
            self._offsets.close()
