"""A Python data source that yields the same pre-built Arrow batch over and over: what Spark
itself can take from a Python source (batch and streaming), whatever the source does.
Options: ``rows`` in all, ``partitions``, ``value_bytes`` a row. Used by spark_bench.py."""

from __future__ import annotations

from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from samsa.spark.schema import TS_MICROS, arrow_schema, constant_string, kafka_schema

ROWS_A_BATCH = 10_000


class CeilingSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow-ceiling"

    def schema(self):
        return kafka_schema(False)

    def reader(self, schema):
        return _Reader(self.options)

    def streamReader(self, schema):
        return _StreamReader(self.options)


class _Reader(DataSourceReader):
    def __init__(self, options):
        self.rows = int(options.get("rows", 1_000_000))
        self.parts = int(options.get("partitions", 2))
        self.value_bytes = int(options.get("value_bytes", 100))

    def partitions(self):
        return [InputPartition(i) for i in range(self.parts)]

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        n = ROWS_A_BATCH
        batch = pa.RecordBatch.from_arrays([
            pa.nulls(n, pa.binary()), pa.array([b"x" * self.value_bytes] * n, pa.binary()), constant_string("t", n),
            pa.array(np.full(n, partition.value, np.int32)), pa.array(np.arange(n, dtype=np.int64)),
            pa.array(np.full(n, 1_767_225_600_000_000, np.int64)).cast(TS_MICROS), pa.array(np.zeros(n, np.int32))],
            schema=arrow_schema(False))
        for _ in range(self.rows // self.parts // n):
            yield batch


class _StreamReader(_Reader, DataSourceStreamReader):
    """One micro-batch holding everything."""

    def initialOffset(self):
        return {"batch": 0}

    def latestOffset(self):
        return {"batch": 1}

    def partitions(self, start, end):
        return super().partitions() if start["batch"] < end["batch"] else []

    def commit(self, end):
        pass
