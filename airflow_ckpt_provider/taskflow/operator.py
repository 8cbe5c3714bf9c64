"""``CheckpointedPySparkOperator``: the Spark provider's ``PySparkOperator`` plus a checkpoint store.

The user's function runs in the worker process with a Spark session (local ``local[*]``
without ``conn_id``; Spark Connect with a ``spark_connect`` connection) and a ready
``CheckpointedJob`` on the task's store. Around it, the operator does what
``CheckpointedSparkSubmitOperator`` does around a submit (``operators/epoch_opening.py``):
the rerun plan, the epoch (opened once the session exists, so a refused connection leaves
no empty epoch), the ``checkpoint_plan`` XCom, the end of the epoch, and the job's summary as
XCom ``checkpoint_result``. The function's own return value stays ``return_value``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
from airflow.providers.apache.spark.operators.spark_pyspark import SPARK_CONTEXT_KEYS, PySparkOperator
from airflow.providers.common.compat.sdk import BaseHook

from airflow_ckpt_provider.contract import (
    ALL_CONFS,
    CONF_PYTHON_DAEMON,
    OPERATOR_CONFS,
    flatten_result,
    with_submit_defaults,
)
from airflow_ckpt_provider.hooks.store_visibility import SparkPlacement
from airflow_ckpt_provider.operators.epoch_opening import STORE_TEMPLATE_FIELDS, EpochOpener, push_result
from airflow_ckpt_provider.store import EpochStatus
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from airflow_ckpt_provider.store.rerun import OnRerun, RerunAction

if TYPE_CHECKING:
    from airflow.sdk import Context

#: The argument that receives the ready ``CheckpointedJob``.
JOB_ARGUMENT = "ckpt_job"
#: Arguments the operator fills in (default None in the function's signature).
INJECTED_ARGUMENTS = (*SPARK_CONTEXT_KEYS, JOB_ARGUMENT)


def with_injected_defaults(python_callable: Callable[..., Any]) -> None:
    """Give ``spark``, ``sc`` and ``ckpt_job`` a default of None in the function's signature, as the
    Spark provider does for ``spark`` and ``sc``: Airflow binds the other arguments at parse time."""
    signature = inspect.signature(python_callable)
    parameters = [p.replace(default=None) if p.name in INJECTED_ARGUMENTS else p for p in signature.parameters.values()]
    python_callable.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]


def _takes(python_callable: Callable[..., Any], name: str) -> bool:
    parameters = inspect.signature(python_callable).parameters.values()
    return any(p.name == name or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def refuse_store_confs(config: Mapping[str, Any]) -> None:
    """The operator names the store and the epoch; a ``spark.ckpt.*`` conf that says otherwise
    would be silently overridden. :class:`InvalidArgumentError` before anything runs."""
    named = sorted(k for k in config if k in OPERATOR_CONFS)
    if named:
        yours = ", ".join(sorted(set(ALL_CONFS) - set(OPERATOR_CONFS)))
        raise InvalidArgumentError(
            f"config_kwargs sets {', '.join(named)}, which the operator sets itself for every run: name the "
            "store with checkpoint_uri (and aws_conn_id); the epoch is opened by the operator. Nothing was "
            f"started or written. (Of the spark.ckpt.* confs only {yours} are yours to set.)",
            reason="out_of_range",
        )


def session_config(
    config_kwargs: Mapping[str, Any], connection_extras: Mapping[str, Any], connect: bool
) -> dict[str, Any]:
    """``config_kwargs`` for the session ``PySparkOperator`` builds: with the worker daemon
    (spark/worker_daemon.py) for a classic session whose connection and ``config_kwargs`` name none,
    as the submit operator sets it. A Spark Connect server's workers are the server's to configure."""
    if connect or CONF_PYTHON_DAEMON in connection_extras:
        return dict(config_kwargs)
    return with_submit_defaults(config_kwargs)


class CheckpointedPySparkOperator(PySparkOperator):
    """Run a Python function on a Spark session with a ready ``CheckpointedJob``, so a retry skips finished keys.

    Takes every ``PySparkOperator`` parameter (``python_callable``, ``conn_id``: none for a
    ``local[*]`` session in the worker, a ``spark_connect`` connection for a Spark Connect
    server; ``config_kwargs``, ``op_kwargs``, ...) and the store parameters of
    ``CheckpointedSparkSubmitOperator``, with the same defaults and meaning:

    :param checkpoint_uri: the store (templated; default one store per job and map index). The local
        default is refused before the session where another host must read it (an executor other than
        the LocalExecutor, a cluster master, a Spark Connect server elsewhere or on a cluster:
        ``store_not_shared``, docs/deployment.md).
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated).
    :param output_roots: the output directories the job writes under (templated).
    :param takeover_open_epoch: take over an epoch another owner holds open.
    :param on_rerun: ``replace`` (default) or ``skip`` over committed output (templated).

    The function takes ``ckpt_job`` (the ``CheckpointedJob`` of this run's epoch) and, if it
    wants, ``spark`` (the session): both default to None in its signature. It should write
    through ``ckpt_job`` only (``skip_completed``/``read_parquet``, then ``write_parquet``/
    ``write``). Its return value is XCom ``return_value``; the job's summary (store, epoch,
    counts, ``degraded``) is XCom ``checkpoint_result``, which ``CheckpointCommitOperator``,
    the clear and the sensor read through ``spark_task_id``. Before the function runs, XCom
    ``checkpoint_plan`` holds what will be skipped. Store credentials stay in this process and
    in the job's task closures, never in Spark confs (docs/security.md). A classic session (no
    connection, or a ``spark`` one) runs its Python tasks through the package's worker daemon
    unless ``config_kwargs`` or the connection names ``spark.python.daemon.module``, as the
    submit operator does (spark/worker_daemon.py).
    """

    template_fields: Sequence[str] = (
        *PySparkOperator.template_fields,
        *STORE_TEMPLATE_FIELDS,
    )
    ui_color = "#f7c873"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        checkpoint_uri: str | None = None,
        aws_conn_id: str | None = None,
        output_roots: Sequence[str] | str | None = None,
        takeover_open_epoch: bool = False,
        on_rerun: OnRerun | str = OnRerun.REPLACE,
        **kwargs: Any,
    ) -> None:
        with_injected_defaults(python_callable)
        if not _takes(python_callable, JOB_ARGUMENT):
            raise InvalidArgumentError(
                f"{getattr(python_callable, '__name__', python_callable)!r} takes no {JOB_ARGUMENT!r} argument: "
                f"a checkpointed task writes through the CheckpointedJob it receives as {JOB_ARGUMENT} "
                "(use @task.pyspark / PySparkOperator for a job without checkpoints)",
                reason="out_of_range",
            )
        super().__init__(python_callable=python_callable, **kwargs)
        self.checkpoint_uri = checkpoint_uri
        self.aws_conn_id = aws_conn_id
        self.output_roots = output_roots
        self.takeover_open_epoch = takeover_open_epoch
        self.on_rerun = on_rerun
        self._epochs: EpochOpener | None = None
        self._context: Context | None = None
        self._session: Any = None
        self._placement: SparkPlacement | None = None

    def _opener(self) -> EpochOpener:
        if self._epochs is None:
            self._epochs = EpochOpener.of(self)
        return self._epochs

    def execute(self, context: Context) -> Any:  # the function's return value
        refuse_store_confs(self.config_kwargs or {})
        self._epochs = None
        self._context = context
        epochs = self._opener()
        self._placement = self._session_placement()
        epochs.refuse_unshared_store(self, context, self._placement)
        store = epochs.hook(context).get_store()
        rerun = epochs.rerun_plan(context, store)
        if rerun.action is RerunAction.SKIP:
            push_result(context, epochs.skipped(context, store, rerun))
            return None
        return super().execute(context)

    def execute_callable(self) -> Any:
        function: Callable[..., Any] = self.python_callable  # type: ignore[has-type]
        config_kwargs = self.config_kwargs
        self.python_callable = self._checkpointed(function)
        extras, connect, _ = self._connection()
        self.config_kwargs = session_config(config_kwargs or {}, extras, connect)
        try:
            return super().execute_callable()  # type: ignore[no-untyped-call]
        finally:
            self.python_callable = function
            self.config_kwargs = config_kwargs
            self._session = None

    def _connection(self) -> tuple[dict[str, Any], bool, str]:
        """The connection's extras, whether it is a Spark Connect server, and the URL ``PySparkOperator``
        builds the session on (no connection: ``local[*]`` in this process)."""
        if not self.conn_id:
            return {}, False, "local[*]"
        connection = BaseHook.get_connection(self.conn_id)
        if connection.conn_type == SparkConnectHook.conn_type:
            return dict(connection.extra_dejson), True, SparkConnectHook(self.conn_id).get_connection_url()
        url = f"{connection.host}:{connection.port}" if connection.port else str(connection.host or "local[*]")
        return dict(connection.extra_dejson), False, url

    def _session_placement(self) -> SparkPlacement:
        """Where the session's driver and executors will run, from the connection and ``config_kwargs``."""
        extras, _, url = self._connection()
        return SparkPlacement.of_session(url, {**extras, **(self.config_kwargs or {})})

    def _checkpointed(self, function: Callable[..., Any]) -> Callable[..., Any]:
        """``function`` run inside an epoch: called by ``PySparkOperator`` once the session exists."""
        context = self._context
        if context is None:  # pragma: no cover - execute() always sets it
            raise RuntimeError("a checkpointed PySpark task runs only from execute()")
        epochs = self._opener()
        takes_spark = _takes(function, "spark")

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            spark = kwargs.get("spark")
            self._session = spark
            if not takes_spark:
                kwargs.pop("spark", None)
            from airflow_ckpt_provider.spark import CheckpointedJob  # the Spark client runs here, on demand

            placement = self._placement
            if placement is not None and placement.connect_url and placement.master is None and spark is not None:
                # A Spark Connect server on this host: its own master decides where the executors run.
                server_master = spark.conf.get("spark.master", None)
                if server_master:
                    epochs.refuse_unshared_store(self, context, placement.with_server_master(str(server_master)))
            store = epochs.hook(context).get_store()
            handoff = epochs.open(context, result_file=False)
            job = None
            try:
                job = CheckpointedJob(
                    spark,
                    handoff.store_uri,
                    epoch=handoff.epoch,
                    **dict(handoff.public_options),
                    **dict(handoff.secret_options),
                )
                returned = function(*args, **{**kwargs, JOB_ARGUMENT: job})
            except BaseException:
                result = None
                if job is not None:
                    try:
                        result = flatten_result(job.finish(succeeded=False))
                    except Exception as exc:  # the store may be what failed: keep the user's error
                        self.log.warning("Could not read the job's result after its failure: %s", exc)
                epochs.end(store, handoff, EpochStatus.FAILED, result)
                raise
            job_result = flatten_result(job.finish(succeeded=True))
            degraded = bool(job_result.get("degraded")) or epochs.degraded(store, handoff.epoch)
            epochs.end(store, handoff, EpochStatus.SUCCEEDED, job_result)
            summary = epochs.summary(context, store, handoff.epoch, job_result, degraded)
            push_result(context, summary)
            self.log.info("Checkpointed job finished: %s", summary)
            return returned

        return run

    def on_kill(self) -> None:
        """Stop this task's Spark jobs; the epoch stays open for the next try to take over (same owner)."""
        spark = self._session
        if spark is None:
            return
        try:
            if type(spark).__module__.startswith("pyspark.sql.connect"):
                spark.interruptAll()  # Spark Connect: this session's operations only
            else:
                spark.sparkContext.cancelAllJobs()
        except Exception as exc:
            self.log.warning("Could not cancel the Spark jobs of this task: %s", exc)
