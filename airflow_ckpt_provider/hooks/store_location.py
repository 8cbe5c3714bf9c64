"""Which store a downstream task (commit, clear, sensor) works on."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.contract import PLAN_XCOM_KEY
from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.store import InvalidStoreUriError

if TYPE_CHECKING:
    from airflow.sdk import Context


def submit_task_result(context: Context, spark_task_id: str | None) -> Mapping[str, Any] | None:
    """The return value of the submit task in this DAG run (None if it has not finished)."""
    if not spark_task_id:
        return None
    value = context["ti"].xcom_pull(task_ids=spark_task_id)
    return value if isinstance(value, Mapping) else None


def resolve_store_uri(context: Context, checkpoint_uri: str | None, spark_task_id: str | None) -> str:
    """``checkpoint_uri`` if given; else the store the submit task ``spark_task_id`` used in
    this run (from its XCom); else that task's default store location for this run."""
    if checkpoint_uri and checkpoint_uri.strip():
        return checkpoint_uri.strip()
    if not spark_task_id:
        raise InvalidStoreUriError(
            "name the store: pass checkpoint_uri, or spark_task_id (the CheckpointedSparkSubmitOperator "
            "whose store this task works on)"
        )
    ti = context["ti"]
    for key in ("return_value", PLAN_XCOM_KEY):
        value = ti.xcom_pull(task_ids=spark_task_id, key=key)
        if isinstance(value, Mapping) and value.get("checkpoint_uri"):
            return str(value["checkpoint_uri"])
    return CheckpointHook.resolve_uri(None, dag_id=ti.dag_id, task_id=spark_task_id, run_id=context["run_id"])
