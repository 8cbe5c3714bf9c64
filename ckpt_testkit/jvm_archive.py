"""A class-data-sharing (AppCDS) archive of Spark's JVM classes for the test suite's JVMs.

Every JVM the suite starts (each spark-submit's driver, the in-process local sessions, the standalone
cluster's daemons and executors) loads, parses and verifies the same several thousand classes from
pyspark's ``jars/`` before it does any work. A dynamic archive (JDK 13+, ``-XX:ArchiveClassesAtExit``)
dumped once from a small representative job holds them ready to map: a trivial ``spark-submit`` took
7-8 s of CPU with it instead of 11-12.5 s (JDK 17, C1 only, serial GC, measured twice each at load ~10).

``python -m ckpt_testkit.jvm_archive`` (scripts/test.sh) prints the JVM options that use the archive,
dumping it first when the venv has none for this JDK and these jars; it prints nothing (and the suite
runs as before) when no archive can be made. A JVM whose class path differs from the archive's (the
spark-submit launcher, another pyspark's jars, ``java -version``) ignores it: its warning is switched
off with ``-Xlog``. Tests only: deployments keep the JVM's defaults.

The archive lives in the venv (``.venv/spark-cds/``), named by a digest of the JDK, the JVM flags and
every jar's name, size and time (what the JVM itself checks before it maps an archive), so a new
pyspark or JDK dumps a new one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: The JVM never prints why it ignores an archive (a class path that differs is the normal case here).
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _digest(flags: str, jars: Path) -> str:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=120, env=_plain_env(flags))
    parts = [java.stderr, flags]
    for jar in sorted(jars.glob("*.jar")):
        stat = jar.stat()
        parts.append(f"{jar.name} {stat.st_size} {stat.st_mtime_ns}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def _plain_env(flags: str) -> dict[str, str]:
    env = dict(os.environ)
    env["JAVA_TOOL_OPTIONS"] = flags
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    return env


def _dump(archive: Path, flags: str, spark_home: Path) -> bool:
    """Run the representative job with ``-XX:ArchiveClassesAtExit``; True if the archive was written."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.partial")
    env = _plain_env(flags)
    env.update(
        {"SPARK_HOME": str(spark_home), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    )
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    with tempfile.TemporaryDirectory(prefix="spark-cds-") as work:
        done = subprocess.run(
            [
                str(spark_home / "bin" / "spark-submit"),
                "--master",
                "local[2]",
                "--conf",
                "spark.ui.enabled=false",
                "--conf",
                "spark.sql.shuffle.partitions=2",
                "--driver-java-options",
                f"-XX:ArchiveClassesAtExit={partial}",
                __file__,
                "job",
                work,
            ],
            env=env,
            cwd=work,
            capture_output=True,
            text=True,
            timeout=900,
        )
    if done.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        print(f"jvm_archive: no archive (spark-submit exit {done.returncode}): {done.stderr[-1500:]}", file=sys.stderr)
        return False
    partial.replace(archive)  # atomic: a JVM never maps a half-written archive
    return True


def options(flags: str) -> str:
    """JVM options using the archive for ``flags`` (dumped first if missing); empty if none can be made."""
    spark_home = _spark_home()
    cache = Path(sys.prefix) / "spark-cds"
    archive = cache / f"spark-{_digest(flags, spark_home / 'jars')}.jsa"
    if not archive.exists():
        for stale in cache.glob("spark-*.jsa"):  # another pyspark's or JDK's: never mapped again
            stale.unlink(missing_ok=True)
        if not _dump(archive, flags, spark_home):
            return ""
    return f"-XX:SharedArchiveFile={archive} {QUIET}"


def _job(work: str) -> None:
    """What most of the suite's JVMs do: DataFrames, a Python UDF and Arrow batches, a shuffle, Parquet."""
    from collections.abc import Iterator

    import pyarrow as pa
    import pyarrow.compute as pc
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F
    from pyspark.sql.types import LongType, StructField, StructType

    spark = SparkSession.builder.appName("jvm-archive").getOrCreate()
    rows = spark.range(0, 2000, numPartitions=2).withColumn("tenant", F.col("id") % 7)

    def doubled(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield batch.append_column("amount", pc.multiply(batch.column("id"), 2))

    schema = StructType([*rows.schema.fields, StructField("amount", LongType())])
    plus_one = F.udf(lambda value: value + 1, LongType())
    frame = rows.mapInArrow(doubled, schema).withColumn("next", plus_one("id")).repartition(2, "tenant")
    frame.write.mode("overwrite").partitionBy("tenant").parquet(f"{work}/out")
    counted = spark.read.parquet(f"{work}/out").groupBy("tenant").agg(F.count("*"), F.sum("amount")).collect()
    assert len(counted) == 7, counted
    spark.stop()


def main(argv: list[str]) -> int:
    if argv[:1] == ["job"]:
        _job(argv[1])
        return 0
    flags = argv[0] if argv else os.environ.get("JAVA_TOOL_OPTIONS", "")
    try:
        print(options(flags))
    except Exception as exc:  # never stop the suite: it runs as before, only slower
        print(f"jvm_archive: no archive ({type(exc).__name__}: {exc})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
