"""The parameters every store-facing task (commit, clear, sensor, reprocess) shares, and what they resolve to.

:class:`CheckpointStoreMixin` holds ``checkpoint_uri``, ``spark_task_id`` and ``aws_conn_id``
the way the Amazon provider's ``AwsBaseHookMixin`` does for its operators and sensors;
``operators/base.py`` and ``sensors/base.py`` give it a constructor. It lives with the hooks so
that sensors and operators import it downward, never each other. Which store those parameters
name is hooks/locator.py's answer; the output roots the store is opened with are the DAG's
(:func:`task_output_anchor`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.locator import TaskStore, resolve_store_uri, submit_task_result, task_stores
from airflow_ckpt_provider.hooks.output_anchor import OutputAnchor

if TYPE_CHECKING:
    from airflow.sdk import Context


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
        this task works on (templated). If it is mapped, a task mapped the same way works on the
        store of its own map index, an unmapped one on every instance's store (hooks/locator.py).
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
        """The store's URI for this task instance (hooks/locator.py, :func:`resolve_store_uri`)."""
        return resolve_store_uri(context, self.checkpoint_uri, self.spark_task_id)

    def task_stores(self, context: Context) -> list[TaskStore]:
        """Every store this task instance works on (see :func:`task_stores`)."""
        return task_stores(context, self.checkpoint_uri, self.spark_task_id)

    def checkpoint_hook(self, context: Context, config: CheckpointConfig | None = None) -> CheckpointHook:
        """A hook on this task instance's store, with this task's connection and the DAG's output roots."""
        return self.store_hook(self.store_uri(context), context, config)

    def store_hook(self, uri: str, context: Context, config: CheckpointConfig | None = None) -> CheckpointHook:
        """A hook on the store ``uri``, opened with the output roots the DAG declares for it
        (:meth:`dag_output_roots`), else ``[ckpt] trusted_output_roots``, else none: then output
        files are kept, and a warning names what to set (hooks/output_anchor.py)."""
        hook = CheckpointHook(uri, aws_conn_id=self.aws_conn_id, config=config)
        return hook.with_output_anchor(self.output_anchor(context, hook.config))

    def output_anchor(self, context: Context, config: CheckpointConfig | None = None) -> OutputAnchor:
        """The output roots this task's stores are opened with (see :func:`task_output_anchor`)."""
        return task_output_anchor(self, self.spark_task_id, context, config or CheckpointConfig.load())

    def dag_output_roots(self, context: Context) -> list[str] | None:
        """The output roots this task and its Spark task declare (see :func:`dag_output_roots`)."""
        return dag_output_roots(self, self.spark_task_id, context)

    def submit_task_result(self, context: Context) -> Mapping[str, Any] | None:
        """The return value of ``spark_task_id`` in this DAG run (None if it has not finished)."""
        return submit_task_result(context, self.spark_task_id)


def dag_output_roots(task: Any, spark_task_id: str | None, context: Context) -> list[str] | None:
    """The ``output_roots`` ``task`` and its ``spark_task_id`` declare in the DAG, rendered for this
    run; None when neither declares any (then the store's records count within its scheme and
    bucket). Never read from the store or XCom (docs/security.md, "The trust model")."""
    roots: list[str] = []
    declared = False
    tasks: list[Any] = [task]
    dag = getattr(task, "dag", None)
    if spark_task_id and dag is not None and dag.has_task(spark_task_id):
        tasks.append(dag.get_task(spark_task_id))
    for each in tasks:
        partial = getattr(each, "partial_kwargs", None)
        value = partial.get("output_roots") if isinstance(partial, Mapping) else getattr(each, "output_roots", None)
        if value is None or value == "" or value == []:
            continue
        if each is not task:  # the task's own fields are rendered already
            value = each.render_template(value, context)
        declared = True
        roots.extend([value] if isinstance(value, str) else [str(v) for v in value])
    return roots if declared else None


def task_output_anchor(
    task: Any, spark_task_id: str | None, context: Context, config: CheckpointConfig
) -> OutputAnchor:
    """What ``task`` opens its stores with: the ``output_roots`` it and its Spark task declare, else
    ``[ckpt] trusted_output_roots``, else nothing (every output file is kept). Logs a warning naming
    the parameter to set when it keeps output files."""
    who = f"output_roots of DAG task '{task.dag_id}.{task.task_id}'"
    if spark_task_id and spark_task_id != task.task_id:
        who += f" and of its Spark task '{spark_task_id}'"
    anchor = OutputAnchor.decide(dag_output_roots(task, spark_task_id, context), who, config.trusted_output_roots)
    if anchor.keeps_output:
        where = f"output_roots=[...] on this task or on {spark_task_id!r}" if spark_task_id else "output_roots=[...]"
        task.log.warning("%s", anchor.warning(where))
    return anchor
