"""Which store(s) a store-facing task (commit, clear, sensor) works on, and the parameters they share.

:class:`CheckpointStoreMixin` holds ``checkpoint_uri``, ``spark_task_id`` and ``aws_conn_id``
and what they resolve to, the way the Amazon provider's ``AwsBaseHookMixin`` does for its
operators and sensors; ``operators/base.py`` and ``sensors/base.py`` give it a constructor.
It lives with the hooks so that sensors and operators import it downward, never each other.

With ``checkpoint_uri`` the task works on that store. With ``spark_task_id`` it works on
the store(s) of that ``CheckpointedSparkSubmitOperator`` in the same DAG run
(docs/airflow.md, "Mapped tasks"):

* submit not mapped: its one store;
* submit mapped (``.expand`` or inside a mapped task group) and this task mapped too:
  the store of the instance with this task's map index;
* submit mapped and this task not mapped: the store of every mapped instance.

Each store comes from the submit instance's XCom (the store it really used), else from
its default location (the job's: same task, map index and logical date).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.contract import PLAN_XCOM_KEY, RESULT_XCOM_KEY, RETURN_XCOM_KEY, XCOM_STORE_URI
from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.default_location import JobIdentity
from airflow_ckpt_provider.hooks.output_anchor import OutputAnchor
from airflow_ckpt_provider.store import CheckpointError, InvalidStoreUriError

if TYPE_CHECKING:
    from airflow.sdk import Context


class AmbiguousStoreError(CheckpointError):
    """The task would have to watch several stores (a mapped submit) where it can watch one."""


@dataclass(frozen=True)
class TaskStore:
    """One store a downstream task works on."""

    uri: str
    #: The map index of the submit instance that owns the store; -1 when the submit is not
    #: mapped or the store was named by ``checkpoint_uri``.
    map_index: int = -1
    #: That Spark task instance's job summary (XCom ``checkpoint_result``; None if it has not finished
    #: or none was named).
    submitted: Mapping[str, Any] | None = None
    #: Its ``checkpoint_plan`` XCom: what its last submit skipped (None if none was pushed).
    plan: Mapping[str, Any] | None = None

    @property
    def degraded(self) -> bool:
        return bool(self.submitted and self.submitted.get("degraded"))


def _own_map_index(context: Context) -> int:
    map_index = getattr(context["ti"], "map_index", None)
    return map_index if isinstance(map_index, int) and map_index >= 0 else -1


def submit_map_indexes(context: Context, spark_task_id: str) -> list[int]:
    """The map indexes of ``spark_task_id`` this task instance works on ([-1]: not mapped)."""
    dag = context.get("dag")
    try:
        task = dag.get_task(spark_task_id) if dag is not None else None
    except Exception as exc:  # TaskNotFound: a typo in spark_task_id
        raise InvalidStoreUriError(
            f"spark_task_id {spark_task_id!r} is not a task of DAG {context['ti'].dag_id!r}: name the "
            "CheckpointedSparkSubmitOperator whose store this task works on (its full id, with the task group)"
        ) from exc
    mapped = task is not None and (bool(task.is_mapped) or task.get_closest_mapped_task_group() is not None)
    if not mapped:
        return [-1]
    own = _own_map_index(context)
    if own >= 0:
        return [own]
    ti = context["ti"]
    count = ti.get_ti_count(dag_id=ti.dag_id, task_ids=[spark_task_id], run_ids=[ti.run_id])
    return list(range(int(count)))


def _pull(context: Context, spark_task_id: str, key: str, map_index: int) -> Mapping[str, Any] | None:
    value = context["ti"].xcom_pull(task_ids=spark_task_id, key=key, map_indexes=map_index)
    return value if isinstance(value, Mapping) else None


def _pull_result(context: Context, spark_task_id: str, map_index: int) -> Mapping[str, Any] | None:
    """The Spark task instance's job summary: XCom ``checkpoint_result`` (both Spark operators push it),
    else ``return_value`` (a submit task run before that key existed)."""
    result = _pull(context, spark_task_id, RESULT_XCOM_KEY, map_index)
    return result if result is not None else _pull(context, spark_task_id, RETURN_XCOM_KEY, map_index)


def task_stores(
    context: Context, checkpoint_uri: str | None, spark_task_id: str | None, aws_conn_id: str | None = None
) -> list[TaskStore]:
    """The stores this task instance works on (see the module docstring), in map-index order."""
    if checkpoint_uri and checkpoint_uri.strip():
        return [TaskStore(checkpoint_uri.strip(), -1, submit_task_result(context, spark_task_id))]
    if not spark_task_id:
        raise InvalidStoreUriError(
            "name the store: pass checkpoint_uri, or spark_task_id (the CheckpointedSparkSubmitOperator "
            "whose store this task works on)"
        )
    ti = context["ti"]
    stores: list[TaskStore] = []
    for map_index in submit_map_indexes(context, spark_task_id):
        submitted = _pull_result(context, spark_task_id, map_index)
        plan = _pull(context, spark_task_id, PLAN_XCOM_KEY, map_index)
        uri = None
        for value in (submitted, plan):
            if value is not None and isinstance(value.get(XCOM_STORE_URI), str) and value[XCOM_STORE_URI]:
                uri = str(value[XCOM_STORE_URI])
                break
        if uri is None:
            job = dataclasses.replace(JobIdentity.from_context(context, spark_task_id, ti.dag_id), map_index=map_index)
            uri = CheckpointHook.for_task_instance(None, job, aws_conn_id=aws_conn_id).uri
        stores.append(TaskStore(uri, map_index, submitted, plan))
    return stores


def submit_task_result(context: Context, spark_task_id: str | None) -> Mapping[str, Any] | None:
    """The job summary of the Spark task instance this task works on (None if it has not finished)."""
    if not spark_task_id:
        return None
    indexes = submit_map_indexes(context, spark_task_id)
    return _pull_result(context, spark_task_id, indexes[0]) if len(indexes) == 1 else None


def resolve_store_uri(
    context: Context, checkpoint_uri: str | None, spark_task_id: str | None, aws_conn_id: str | None = None
) -> str:
    """The one store this task instance works on; :class:`AmbiguousStoreError` for an unmapped
    task downstream of a mapped submit (map this task too, or name ``checkpoint_uri``)."""
    stores = task_stores(context, checkpoint_uri, spark_task_id, aws_conn_id)
    if len(stores) != 1:
        raise AmbiguousStoreError(
            f"{spark_task_id!r} is mapped ({len(stores)} instances, one store each) and this task is not: "
            "map it the same way (.partial(...).expand(...), or put it in the same mapped task group) so "
            "each instance works on the store of its map index, or name one store with checkpoint_uri"
        )
    return stores[0].uri


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
        store of its own map index, an unmapped one on every instance's store (see the module).
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
        return resolve_store_uri(context, self.checkpoint_uri, self.spark_task_id, self.aws_conn_id)

    def task_stores(self, context: Context) -> list[TaskStore]:
        """Every store this task instance works on (see :func:`task_stores`)."""
        return task_stores(context, self.checkpoint_uri, self.spark_task_id, self.aws_conn_id)

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
