"""Which store a task instance uses: the one answer for operators, sensors, the CLI and the UI.

One rule (:func:`store_uri`): the operator's ``checkpoint_uri`` (templated, as rendered), else the
``[ckpt]`` default location of the task instance's job (dag, task, map index and its run's logical
date; hooks/default_location.py). A task that names no store but a ``spark_task_id`` (commit,
clear, sensor, reprocess) works on that Spark task's store (docs/airflow.md, "Mapped tasks"):

* submit not mapped: its one store;
* submit mapped (``.expand`` or inside a mapped task group) and this task mapped too:
  the store of the instance with this task's map index;
* submit mapped and this task not mapped: the store of every mapped instance.

Where the operator's fields come from depends on who asks:

* a running task (:func:`task_stores`, :func:`resolve_store_uri`): its own rendered fields; the
  Spark task's store is the one that instance's XCom names (the store it really used), else the
  Spark task's default location;
* the Checkpoints view and ``airflow-ckpt --dag-id/--task-id/--run-id`` (:func:`configured_store`,
  :func:`locate_task_store`): Airflow's metadata DB only (hooks/task_fields.py: the rendered
  fields, else the serialized DAG), never XCom, which anyone with edit rights on a DAG can write.

The output roots such a store is opened with: :func:`task_instance_anchor` (hooks/output_anchor.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.contract import PLAN_XCOM_KEY, RESULT_XCOM_KEY, RETURN_XCOM_KEY, XCOM_STORE_URI
from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.declared_roots import declared_output_roots
from airflow_ckpt_provider.hooks.default_location import JobIdentity, default_location
from airflow_ckpt_provider.hooks.output_anchor import OutputAnchor
from airflow_ckpt_provider.hooks.task_fields import (
    CONN_FIELD,
    SOURCE_DEFAULT,
    SPARK_TASK_FIELD,
    URI_FIELD,
    field_text,
    job_identity,
    lowest_map_index,
    operator_fields,
    task_instance_states,
)
from airflow_ckpt_provider.store.deletion_guard import canonical_uri
from airflow_ckpt_provider.store.errors import InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from airflow.sdk import Context
    from sqlalchemy.orm import Session


def store_uri(checkpoint_uri: str | None, job: JobIdentity, config: CheckpointConfig | None = None) -> str:
    """``checkpoint_uri`` if given, else the ``[ckpt]`` default location of ``job``: one store per job,
    ``{base}/{dag_id}/{task_id}/date={logical date}`` (or ``run={run_id}`` for a run without a logical
    date), ``.../map_index={i}`` for mapped instance ``i`` (hooks/default_location.py). Reads no store."""
    if checkpoint_uri and checkpoint_uri.strip():
        return checkpoint_uri.strip()
    return default_location((config or CheckpointConfig.load()).store_base, job)


def task_instance_anchor(
    dag_id: str, task_id: str, declared: Sequence[str] | None, configured: Sequence[str]
) -> OutputAnchor:
    """The output roots a task instance's store is opened with outside the task (the view, the CLI): the
    DAG's ``declared`` ones, else the ``configured`` ``[ckpt] trusted_output_roots``, else none."""
    return OutputAnchor.decide(declared, f"output_roots of DAG '{dag_id}' for task '{task_id}'", configured)


# ---------------------------------------------------------------- in a running task


@dataclass(frozen=True)
class TaskStore:
    """One store a running store-facing task works on."""

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
        raise InvalidArgumentError(
            f"spark_task_id {spark_task_id!r} is not a task of DAG {context['ti'].dag_id!r}: name the "
            "CheckpointedSparkSubmitOperator whose store this task works on (its full id, with the task group)",
            reason="store_uri",
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


def task_stores(context: Context, checkpoint_uri: str | None, spark_task_id: str | None) -> list[TaskStore]:
    """The stores this task instance works on (see the module docstring), in map-index order."""
    if checkpoint_uri and checkpoint_uri.strip():
        return [TaskStore(checkpoint_uri.strip(), -1, submit_task_result(context, spark_task_id))]
    if not spark_task_id:
        raise InvalidArgumentError(
            "name the store: pass checkpoint_uri, or spark_task_id (the CheckpointedSparkSubmitOperator "
            "whose store this task works on)",
            reason="store_uri",
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
            uri = store_uri(None, job)
        stores.append(TaskStore(uri, map_index, submitted, plan))
    return stores


def submit_task_result(context: Context, spark_task_id: str | None) -> Mapping[str, Any] | None:
    """The job summary of the Spark task instance this task works on (None if it has not finished)."""
    if not spark_task_id:
        return None
    indexes = submit_map_indexes(context, spark_task_id)
    return _pull_result(context, spark_task_id, indexes[0]) if len(indexes) == 1 else None


def resolve_store_uri(context: Context, checkpoint_uri: str | None, spark_task_id: str | None) -> str:
    """The one store this task instance works on; :class:`InvalidArgumentError` (``ambiguous_store``) for an unmapped
    task downstream of a mapped submit (map this task too, or name ``checkpoint_uri``)."""
    stores = task_stores(context, checkpoint_uri, spark_task_id)
    if len(stores) != 1:
        raise InvalidArgumentError(
            f"{spark_task_id!r} is mapped ({len(stores)} instances, one store each) and this task is not: "
            "map it the same way (.partial(...).expand(...), or put it in the same mapped task group) so "
            "each instance works on the store of its map index, or name one store with checkpoint_uri",
            reason="ambiguous_store",
        )
    return stores[0].uri


# ---------------------------------------------------------------- from the metadata DB


@dataclass(frozen=True)
class ConfiguredStore:
    """Where a task instance keeps its checkpoints, and how that was decided (no credentials)."""

    uri: str
    aws_conn_id: str | None
    source: str  # SOURCE_RENDERED, SOURCE_NAMED or SOURCE_DEFAULT
    #: The Spark task whose store this is, when the task itself names none (commit, clear, sensor).
    spark_task_id: str | None = None
    #: Whether the task is one of the provider's operators (it has a ``checkpoint_uri`` field).
    checkpoint_task: bool = False


def configured_store(
    session: Session, dag_id: str, task_id: str, run_id: str, *, map_index: int = -1
) -> ConfiguredStore:
    """The store the task instance's operator names (see the module docstring), read from the DB.

    Reads only the metadata DB: no store is opened. Raises :class:`NotFoundError` (``store_location``).
    """
    fields = operator_fields(session, dag_id, task_id, run_id, map_index)
    uri = field_text(fields.values.get(URI_FIELD))
    conn = field_text(fields.values.get(CONN_FIELD))
    spark_task_id = field_text(fields.values.get(SPARK_TASK_FIELD))
    if uri is None and spark_task_id is not None and spark_task_id != task_id:
        if map_index < 0:  # an unmapped task over a mapped submit works on every instance's store: show the first
            map_index = lowest_map_index(session, dag_id, spark_task_id, run_id)
        spark = operator_fields(session, dag_id, spark_task_id, run_id, map_index)
        spark_uri = field_text(spark.values.get(URI_FIELD))
        return ConfiguredStore(
            uri=store_uri(spark_uri, job_identity(session, dag_id, spark_task_id, run_id, map_index)),
            aws_conn_id=conn or field_text(spark.values.get(CONN_FIELD)),
            source=spark.source if spark_uri else SOURCE_DEFAULT,
            spark_task_id=spark_task_id,
            checkpoint_task=fields.checkpoint_task,
        )
    return ConfiguredStore(
        uri=store_uri(uri, job_identity(session, dag_id, task_id, run_id, map_index)),
        aws_conn_id=conn,
        source=fields.source if uri else SOURCE_DEFAULT,
        checkpoint_task=fields.checkpoint_task,
    )


#: Task-instance states in which the task may be writing to its store right now.
ACTIVE_STATES = frozenset({"running", "queued", "scheduled", "restarting", "deferred", "up_for_reschedule"})


@dataclass(frozen=True)
class TaskStoreRef:
    """Where one task instance keeps its checkpoints (no credentials here)."""

    dag_id: str
    task_id: str
    run_id: str
    uri: str
    aws_conn_id: str | None
    state: str | None
    source: str  # SOURCE_RENDERED, SOURCE_NAMED or SOURCE_DEFAULT
    map_index: int = -1
    #: The Spark task whose store this is, for a commit/clear/sensor task that names none itself.
    spark_task_id: str | None = None
    #: Every map index of the task in this run (empty: the task is not mapped); each has its own store.
    map_indexes: tuple[int, ...] = ()
    #: The output roots the DAG declares for this store (hooks/declared_roots.py): the only places
    #: an action may delete, move or write output files (empty: none; docs/security.md).
    output_roots: tuple[str, ...] = ()

    @classmethod
    def of(
        cls,
        dag_id: str,
        task_id: str,
        run_id: str,
        map_index: int,
        state: str | None,
        found: ConfiguredStore,
        map_indexes: tuple[int, ...] = (),
        output_roots: tuple[str, ...] = (),
    ) -> TaskStoreRef:
        """The ref of a ``found`` store, named as the store compares locations (``canonical_uri``: a
        local path as its escaped ``file://`` URI, ``s3a://`` as ``s3://``, no trailing ``/``), so two
        tasks naming one store are one row of the view."""
        return cls(
            dag_id=dag_id,
            task_id=task_id,
            run_id=run_id,
            uri=canonical_uri(found.uri),
            aws_conn_id=found.aws_conn_id,
            state=state,
            source=found.source,
            map_index=map_index,
            spark_task_id=found.spark_task_id,
            map_indexes=map_indexes,
            output_roots=output_roots,
        )


def locate_task_store(session: Session, dag_id: str, task_id: str, run_id: str, map_index: int = -1) -> TaskStoreRef:
    """The store of a task instance that exists in the DB. Raises :class:`NotFoundError` (``task_instance``),
    :class:`NotFoundError` (``store_location``) (a templated location the task has not rendered yet).

    Each mapped instance has its own store; ``map_index`` -1 on a mapped task (Airflow's page of
    all its instances) means its lowest map index, and the ref lists the others.
    """
    states = task_instance_states(session, dag_id, task_id, run_id)
    mapped = tuple(m for m in states if m >= 0)
    if map_index < 0 and mapped:
        map_index = mapped[0]
    if map_index not in states:
        raise NotFoundError(
            f"no map index {map_index} of task {task_id!r} in run {run_id!r} of DAG {dag_id!r}"
            + (f" (it has map indexes {mapped[0]}..{mapped[-1]})" if mapped else " (the task is not mapped)"),
            reason="task_instance",
        )
    found = configured_store(session, dag_id, task_id, run_id, map_index=map_index)
    state = states[map_index]
    if found.source != SOURCE_DEFAULT:
        # A store the operator names may be shared by all of the task's instances: it is in use
        # while any of them is active (default stores are one per map index).
        active = [s for s in states.values() if s in ACTIVE_STATES]
        state = active[0] if active else state
    roots = declared_output_roots(session, dag_id, task_id, run_id, map_index)
    return TaskStoreRef.of(dag_id, task_id, run_id, map_index, state, found, mapped, roots)
