"""The user-UDF row-key job run as a Spark Connect client from a venv that has only ``pyspark-client``
(no JVM, no py4j, no ``pyspark.core``): ``python client_only_job.py <spec json>``.

Writes a JSON report to ``spec["report"]``: what the write did or the error it raised, and which
classic-only modules the run imported (none may be: a client-only install has none of them).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))


def main() -> int:
    spec = json.loads(sys.argv[1])
    from pyspark.sql import SparkSession
    from pyspark.util import is_remote_only

    from airflow_ckpt_provider.spark import CheckpointedJob
    from tests.spark.jobs.user_udf import run

    report: dict[str, object] = {"remote_only": is_remote_only()}
    spark = SparkSession.builder.remote(spec["url"]).getOrCreate()
    try:
        job = CheckpointedJob(spark, spec["store_uri"], epoch=spec["epoch"])
        summary = run(
            spark,
            job,
            inputs=spec["inputs"],
            output=spec["output"],
            key=spec["key"],
            num_partitions=spec["partitions"],
            bad_event=spec.get("bad_event"),
            fail_marker=spec.get("fail_marker"),
        )
        report.update(keys=summary.keys, rows=summary.rows, engine=summary.engine, session=job.finish()["session"])
    except Exception as error:  # the report carries it to the test
        report["error"] = f"{type(error).__name__}: {error}"[:3000]
    finally:
        spark.stop()
    report["classic_modules"] = sorted(
        name
        for name in sys.modules
        if name.split(".")[0] == "py4j"
        or name.startswith(("pyspark.core", "pyspark.java_gateway"))
        or name.endswith("spark.backend.classic")
    )
    with open(spec["report"], "w", encoding="utf-8") as handle:
        json.dump(report, handle)
    return 0 if "error" not in report else 3


if __name__ == "__main__":
    raise SystemExit(main())
