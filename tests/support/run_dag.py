"""Run one DAG run with ``dag.test()`` in a fresh process (the harness calls this).

``python -m tests.support.run_dag DAG_ID LOGICAL_DATE RUN_AFTER RESULT_JSON [CONF_JSON] [only_failed]``

``dag.test()`` derives the run id from ``run_after``: passing the same ``run_after``
again re-runs the *same* DAG run id (``dag.test()`` deletes the old run and its task
instances first), which is how a test "clears the failed run and runs it again";
``only_failed`` keeps the run and clears only its failed task instances.
"""

from __future__ import annotations

import datetime as dt
import json
import sys
from typing import Any


def main(argv: list[str]) -> int:
    dag_id, logical_date, run_after, result_path = argv[:4]
    run_conf = json.loads(argv[4]) if len(argv) > 4 and argv[4] else None
    only_failed = len(argv) > 5 and argv[5] == "only_failed"

    from airflow.utils.cli import get_bagged_dag

    if only_failed:
        _keep_the_run_and_clear_only_failed()

    dag = get_bagged_dag(None, dag_id)
    dag_run = dag.test(
        logical_date=dt.datetime.fromisoformat(logical_date),
        run_after=dt.datetime.fromisoformat(run_after),
        run_conf=run_conf,
    )
    with open(result_path, "w", encoding="utf-8") as handle:
        json.dump({"run_id": dag_run.run_id, "state": str(dag_run.state)}, handle)
    return 0


def _keep_the_run_and_clear_only_failed() -> None:
    """Make ``dag.test()`` behave like the UI's "Clear -> Only failed" on an existing run.

    ``dag.test()`` clears the run's task instances (``SerializedDAG.clear_dags``), then deletes the
    run and creates it anew (``get_or_create_dagrun``): every task would run again. Here only the
    failed and upstream-failed task instances are cleared, and the run is kept (state running), so
    finished instances keep their state and XComs.
    """
    import airflow.models.dagrun as dagrun_module
    from airflow.serialization.definitions.dag import SerializedDAG
    from airflow.utils.state import DagRunState
    from sqlalchemy import select

    clear_dags = SerializedDAG.clear_dags.__func__  # type: ignore[attr-defined]

    def clear_only_failed(cls: type[SerializedDAG], *args: Any, **kwargs: Any) -> Any:
        return clear_dags(cls, *args, **{**kwargs, "only_failed": True})

    SerializedDAG.clear_dags = classmethod(clear_only_failed)  # type: ignore[method-assign,assignment]
    create = dagrun_module.get_or_create_dagrun

    def keep_existing_run(**kwargs: Any) -> Any:
        session, dag = kwargs["session"], kwargs["dag"]
        run = session.scalar(
            select(dagrun_module.DagRun).where(
                dagrun_module.DagRun.dag_id == dag.dag_id, dagrun_module.DagRun.logical_date == kwargs["logical_date"]
            )
        )
        if run is None:
            return create(**kwargs)
        run.state = DagRunState.RUNNING
        session.commit()
        run.dag = dag
        return run

    dagrun_module.get_or_create_dagrun = keep_existing_run


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
