"""Which store a store-facing task (commit, clear, sensor) works on, and the parameters they share.

:class:`CheckpointStoreMixin` holds ``checkpoint_uri``, ``spark_task_id`` and ``aws_conn_id``
and what they resolve to, the way the Amazon provider's ``AwsBaseHookMixin`` does for its
operators and sensors; ``operators/base.py`` and ``sensors/base.py`` give it a constructor.
It lives with the hooks so that sensors and operators import it downward, never each other.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.contract import PLAN_XCOM_KEY, RETURN_XCOM_KEY, XCOM_STORE_URI
from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.config import CheckpointConfig
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
    for key in (RETURN_XCOM_KEY, PLAN_XCOM_KEY):
        value = ti.xcom_pull(task_ids=spark_task_id, key=key)
        if isinstance(value, Mapping) and value.get(XCOM_STORE_URI):
            return str(value[XCOM_STORE_URI])
    return CheckpointHook.resolve_uri(None, dag_id=ti.dag_id, task_id=spark_task_id, run_id=context["run_id"])


#: Template fields of every store-facing task: rendered, and kept in the serialized DAG where the UI reads them.
STORE_TEMPLATE_FIELDS = ("aws_conn_id", "checkpoint_uri", "spark_task_id")


def store_template_fields(*fields: str) -> tuple[str, ...]:
    """``STORE_TEMPLATE_FIELDS`` plus a task's own ``fields``, each once, in a stable order."""
    return tuple(dict.fromkeys((*STORE_TEMPLATE_FIELDS, *fields)))


class CheckpointStoreMixin:
    """The store a commit, clear or sensor task works on.

    :param checkpoint_uri: the store (templated). Default: the store the submit task
        ``spark_task_id`` used in this DAG run (its XCom), else that task's default location.
    :param spark_task_id: the ``CheckpointedSparkSubmitOperator`` of this DAG run whose store
        this task works on (templated).
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated; default
        ``[ckpt] aws_conn_id``).
    """

    checkpoint_uri: str | None
    spark_task_id: str | None
    aws_conn_id: str | None

    def _set_store_params(self, checkpoint_uri: str | None, spark_task_id: str | None, aws_conn_id: str | None) -> None:
        self.checkpoint_uri = checkpoint_uri
        self.spark_task_id = spark_task_id
        self.aws_conn_id = aws_conn_id

    def store_uri(self, context: Context) -> str:
        """The store's URI for this task instance (see :func:`resolve_store_uri`)."""
        return resolve_store_uri(context, self.checkpoint_uri, self.spark_task_id)

    def checkpoint_hook(self, context: Context, config: CheckpointConfig | None = None) -> CheckpointHook:
        """A hook on this task instance's store, with this task's connection."""
        return CheckpointHook(self.store_uri(context), aws_conn_id=self.aws_conn_id, config=config)

    def submit_task_result(self, context: Context) -> Mapping[str, Any] | None:
        """The return value of ``spark_task_id`` in this DAG run (None if it has not finished)."""
        return submit_task_result(context, self.spark_task_id)
