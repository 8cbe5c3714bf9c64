"""``@task.checkpointed_pyspark``: ``@task.pyspark`` whose function gets a ready ``CheckpointedJob``.

::

    @task.checkpointed_pyspark(conn_id="spark_connect_default", output_roots=[OUT])
    def orders(tenant: str, spark=None, ckpt_job=None):
        df = ckpt_job.skip_completed(spark.read.parquet(...), key="order_id", unique=True)
        ckpt_job.write_parquet(transform(df), OUT, engine="arrow")

Registered in the provider's ``task-decorators``; the operator is
:class:`~airflow_ckpt_provider.taskflow.operator.CheckpointedPySparkOperator`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_ckpt_provider.taskflow.operator import CheckpointedPySparkOperator, with_injected_defaults


class _CheckpointedPySparkDecoratedOperator(DecoratedOperator, CheckpointedPySparkOperator):  # type: ignore[misc]
    custom_operator_name = "@task.checkpointed_pyspark"
    template_fields: Sequence[str] = (
        *DecoratedOperator.template_fields,
        "checkpoint_uri",
        "aws_conn_id",
        "output_roots",
        "on_rerun",
    )

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Sequence[Any] | None = None,
        op_kwargs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        # Before DecoratedOperator binds the call's arguments to the signature at parse time.
        with_injected_defaults(python_callable)
        super().__init__(
            kwargs_to_upstream={"python_callable": python_callable, "op_args": op_args, "op_kwargs": op_kwargs},
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            **kwargs,
        )


def checkpointed_pyspark_task(
    python_callable: Callable[..., Any] | None = None, multiple_outputs: bool | None = None, **kwargs: Any
) -> TaskDecorator:
    """``@task.checkpointed_pyspark``: takes ``CheckpointedPySparkOperator``'s parameters."""
    return task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=_CheckpointedPySparkDecoratedOperator,
        **kwargs,
    )
