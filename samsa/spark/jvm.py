"""Samsa's JVM side for Spark: one small jar (``jvm/samsa-spark.jar``, built from the Java
sources beside it) with what PySpark cannot give Spark's Real-Time Mode, which runs only JVM
operators: the payments pipeline's velocity rule as a ``transformWithState`` processor
(``jvm/samsa/spark/Velocity.java``).

:func:`session_conf` puts the jar on the driver's class path and ships it to executors
(``spark.driver.extraClassPath``, then ``SparkContext.addJar``: :func:`ship`);
``samsa.spark.local_session`` does both. A session of your own needs the same
(``python -m samsa.spark.jvm`` prints the jar's path). In a checkout with a JDK the jar is rebuilt when a source changed
(``python -m samsa.spark.jvm build``); the wheel ships it built. The jar holds the digest of
the sources it was built from.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "jvm"
JAR = HERE / "samsa-spark.jar"
SOURCES = sorted((HERE / "samsa").rglob("*.java"))
STAMP = "META-INF/samsa-sources.sha256"  # in the jar: the sources it was built from


def sources_digest() -> str:
    h = hashlib.sha256()
    for path in SOURCES:
        h.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def built_from(jar_path: Path) -> str | None:
    try:
        with zipfile.ZipFile(jar_path) as jar:
            return jar.read(STAMP).decode()
    except (OSError, KeyError, zipfile.BadZipFile):
        return None


def build(dest: Path = JAR) -> Path:
    """Compile the sources against PySpark's jars (Java 17 bytecode) into ``dest``. Entries carry
    a fixed time, so the same sources and compiler give the same jar."""
    import pyspark
    javac = shutil.which("javac")
    if javac is None:
        raise RuntimeError("building Samsa's Spark jar needs a JDK's javac")
    classpath = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([javac, "--release", "17", "-nowarn", "-cp", classpath, "-d", out, *map(str, SOURCES)],
                       check=True, capture_output=True, text=True)
        tmp = dest.with_name(f".{dest.name}.{uuid.uuid4().hex}")  # two processes may build at once
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as jar:
            entries = [(str(p.relative_to(out)), p.read_bytes()) for p in sorted(Path(out).rglob("*.class"))]
            for name, data in [*entries, (STAMP, sources_digest().encode())]:
                jar.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data, zipfile.ZIP_DEFLATED)
        os.replace(tmp, dest)
    return dest


def jar() -> Path:
    """The jar, rebuilt first where the sources beside it changed since (and a JDK is at hand)."""
    if built_from(JAR) != sources_digest():
        if shutil.which("javac") is None:
            raise RuntimeError(f"{JAR} is missing or older than its sources; build it with a JDK: "
                               "python -m samsa.spark.jvm build")
        build()
    return JAR


def session_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with the jar on the driver's class path (a setting read when the driver's JVM
    starts); :func:`ship` then gives it to the executors."""
    out = dict(conf)
    key = "spark.driver.extraClassPath"
    out[key] = f"{out[key]}{os.pathsep}{jar()}" if out.get(key) else str(jar())
    return out


def ship(spark: Any) -> None:
    """The jar to the session's executors (``SparkContext.addJar``). Not through ``spark.jars``:
    a session's own ``spark.jars`` replaces the list ``spark.jars.packages`` (Spark's Kafka
    connector) was merged into, and the executors then lack the connector."""
    spark.sparkContext._jsc.addJar(str(jar()))


def velocity(df: Any, key: str, time: str, max_count: int, window_ms: int, quiet_ms: int) -> Any:
    """``df`` with a boolean column ``velocity``: more than ``max_count`` rows of the same ``key``
    in the ``window_ms`` up to each row's ``time`` (ms, the row included), kept per key in Spark's
    state store; a key quiet for ``quiet_ms`` of processing time loses its state."""
    from pyspark.sql import DataFrame
    spark = df.sparkSession
    jdf = spark._jvm.samsa.spark.Velocity.apply(df._jdf, key, time, max_count, window_ms, quiet_ms)
    return DataFrame(jdf, spark)


if __name__ == "__main__":
    print(build() if sys.argv[1:] == ["build"] else jar())
