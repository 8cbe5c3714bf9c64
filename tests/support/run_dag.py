"""Run one DAG run with ``dag.test()`` in a fresh process (the harness calls this).

``python -m tests.support.run_dag DAG_ID LOGICAL_DATE RUN_AFTER RESULT_JSON [CONF_JSON]``

``dag.test()`` derives the run id from ``run_after``: passing the same ``run_after``
again re-runs the *same* DAG run id (``dag.test()`` deletes the old run's task
instances first), which is how a test "clears the failed run and runs it again".
"""

from __future__ import annotations

import datetime as dt
import json
import sys


def main(argv: list[str]) -> int:
    dag_id, logical_date, run_after, result_path = argv[:4]
    run_conf = json.loads(argv[4]) if len(argv) > 4 and argv[4] else None

    from airflow.utils.cli import get_bagged_dag

    dag = get_bagged_dag(None, dag_id)
    dag_run = dag.test(
        logical_date=dt.datetime.fromisoformat(logical_date),
        run_after=dt.datetime.fromisoformat(run_after),
        run_conf=run_conf,
    )
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump({"run_id": dag_run.run_id, "state": str(dag_run.state)}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
