"""Samsa's JVM side for Spark: one small jar (``jvm/samsa-spark.jar``, built from the Java
sources beside it) with what PySpark cannot give Spark's Real-Time Mode, which runs only JVM
operators: the payments pipeline's velocity rule as a ``transformWithState`` processor
(``jvm/samsa/spark/Velocity.java``).

:func:`session_conf` puts the jar on the driver's class path and ships it to executors
(``spark.driver.extraClassPath``, ``spark.jars``); ``samsa.spark.local_session`` applies it. A
session of your own needs the same two settings (``python -m samsa.spark.jvm`` prints the
jar's path). In a checkout with a JDK the jar is rebuilt when a source is newer
(``python -m samsa.spark.jvm build``); the wheel ships it built.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent / "jvm"
JAR = HERE / "samsa-spark.jar"
SOURCES = sorted((HERE / "samsa").rglob("*.java"))


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
        tmp = dest.with_suffix(".tmp")
        with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as jar:
            for path in sorted(Path(out).rglob("*.class")):
                info = zipfile.ZipInfo(str(path.relative_to(out)), date_time=(2026, 1, 1, 0, 0, 0))
                jar.writestr(info, path.read_bytes(), zipfile.ZIP_DEFLATED)
        os.replace(tmp, dest)
    return dest


def jar() -> Path:
    """The jar, rebuilt first where a source is newer and a JDK is at hand."""
    stale = not JAR.exists() or any(s.stat().st_mtime > JAR.stat().st_mtime for s in SOURCES)
    if stale and shutil.which("javac") is not None:
        build()
    if not JAR.exists():
        raise RuntimeError(f"{JAR} is missing (build it with a JDK: python -m samsa.spark.jvm build)")
    return JAR


def session_conf(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with the jar added to the driver's class path and to the jars shipped to executors."""
    path = str(jar())
    out = dict(conf)
    for key, sep in (("spark.driver.extraClassPath", os.pathsep), ("spark.jars", ",")):
        out[key] = f"{out[key]}{sep}{path}" if out.get(key) else path
    return out


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
