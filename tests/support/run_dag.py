"""Run one DAG run with ``dag.test()`` in a fresh process (the harness calls this).

``python -m tests.support.run_dag DAG_ID LOGICAL_DATE RUN_AFTER RESULT_JSON [CONF_JSON] [only_failed]``

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
    only_failed = len(argv) > 5 and argv[5] == "only_failed"

    from airflow.utils.cli import get_bagged_dag

    if only_failed:
        # dag.test() clears the run's task instances through SerializedDAG.clear_dags; clear
        # only the failed ones instead, as the UI's "Clear -> Only failed" does.
        from airflow.serialization.definitions.dag import SerializedDAG

        clear_dags = SerializedDAG.clear_dags.__func__  # type: ignore[attr-defined]

        def clear_only_failed(cls: type[SerializedDAG], *args: object, **kwargs: object) -> object:
            return clear_dags(cls, *args, **{**kwargs, "only_failed": True})

        SerializedDAG.clear_dags = classmethod(clear_only_failed)  # type: ignore[method-assign,assignment]

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
