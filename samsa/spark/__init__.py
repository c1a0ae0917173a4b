"""Samsa for Spark: a PySpark data source ``samsa`` with the options and columns of Spark's Kafka one.

    import samsa.spark
    spark = samsa.spark.local_session()          # or your own SparkSession
    samsa.spark.register(spark)
    df = (spark.readStream.format("samsa")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .load())

Spark's own Kafka connector is a JVM jar; this one is Python (``pyspark.sql.datasource``,
Spark 4), built on Samsa's consumer and producer, so it needs nothing but pyspark.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["register", "prepare_environment", "local_session", "ExactlyOnceWriter"]


def __getattr__(name: str) -> Any:
    if name == "ExactlyOnceWriter":
        from samsa.spark.exactly_once import ExactlyOnceWriter
        return ExactlyOnceWriter
    raise AttributeError(f"module 'samsa.spark' has no attribute {name!r}")


def prepare_environment() -> None:
    """Python workers must run this interpreter (it has pyarrow and samsa), and Spark must bind
    to loopback when the host name does not resolve; set both unless the user already has."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def register(spark: Any) -> None:
    """Make ``format("samsa")`` available in this session."""
    prepare_environment()
    from samsa.spark.source import SamsaDataSource
    spark.dataSource.register(SamsaDataSource)


def local_session(app_name: str = "samsa", master: str = "local[2]", **conf: Any) -> Any:
    """A local SparkSession for pipelines and tests, with the ``samsa`` source registered.

    Small-machine defaults: few shuffle partitions, no UI, quiet logs; state in RocksDB (Spark's
    transformWithState, which the payments velocity rule runs in, takes no other store); ``conf``
    overrides them."""
    prepare_environment()
    from pyspark.sql import SparkSession
    settings = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                "spark.sql.session.timeZone": "UTC", "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.host": "127.0.0.1", "spark.ui.showConsoleProgress": "false",
                "spark.sql.streaming.stateStore.providerClass":
                    "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"}
    settings.update({k: str(v) for k, v in conf.items()})
    from samsa.spark.jvm import session_conf
    settings = session_conf(settings)  # Samsa's jar (the Real-Time velocity rule) on the class path
    builder = SparkSession.builder.master(master).appName(app_name)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    from samsa.spark.jvm import ship
    ship(spark)  # and to the executors
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
