"""Samsa's Spark jar (samsa/spark/jvm): built from the sources beside it, and its velocity
processor in Spark's state store, against the rule worked out in Python."""

from __future__ import annotations

from samsa.spark import jvm


def test_the_shipped_jar_is_built_from_its_sources(tmp_path):
    rebuilt = jvm.build(tmp_path / "rebuilt.jar")
    assert rebuilt.read_bytes() == jvm.JAR.read_bytes(), \
        "samsa/spark/jvm/samsa-spark.jar is stale: python -m samsa.spark.jvm build, and commit it"
