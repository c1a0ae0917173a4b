"""The columns of Spark's Kafka source, as a Spark schema and as the Arrow schema that read() yields.

Spark checks every Arrow batch a Python source returns against the declared schema, type
for type: timestamps must be ``timestamp[us, tz=UTC]``, ints ``int32``.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType, StructField, StructType,
                               TimestampType)

from samsa.client.consumer_internals.records import ConsumerRecord

HEADER = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def kafka_schema(include_headers: bool) -> StructType:
    fields = [StructField("key", BinaryType()), StructField("value", BinaryType()),
              StructField("topic", StringType()), StructField("partition", IntegerType()),
              StructField("offset", LongType()), StructField("timestamp", TimestampType()),
              StructField("timestampType", IntegerType())]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER)))
    return StructType(fields)


ARROW_HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = [("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()), ("partition", pa.int32()),
              ("offset", pa.int64()), ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32())]
    if include_headers:
        fields.append(("headers", pa.list_(ARROW_HEADER)))
    return pa.schema(fields)


_TS = pa.timestamp("us", tz="UTC")


def to_arrow(records: Sequence[ConsumerRecord], schema: pa.Schema) -> pa.RecordBatch:
    """One Arrow batch of records of one partition (columns built in C from the transposed tuples)."""
    n = len(records)
    _, partitions, offsets, timestamps, ts_types, keys, values, headers, _ = zip(*records)
    ts = pc.multiply(pa.array(timestamps, pa.int64()), 1000).cast(_TS)
    columns = [pa.array(keys, pa.binary()), pa.array(values, pa.binary()),
               pa.array([records[0].topic] * n, pa.string()), pa.array(partitions, pa.int32()),
               pa.array(offsets, pa.int64()), ts, pa.array(ts_types, pa.int32())]
    if len(schema) > 7:
        columns.append(pa.array([[{"key": k, "value": v} for k, v in h] for h in headers], pa.list_(ARROW_HEADER)))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
