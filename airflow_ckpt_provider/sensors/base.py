"""``CheckpointStoreBaseSensor``: the base of sensors that watch a checkpoint store."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator

from airflow_ckpt_provider.hooks.store_location import STORE_TEMPLATE_FIELDS, CheckpointStoreMixin


class CheckpointStoreBaseSensor(BaseSensorOperator, CheckpointStoreMixin):
    """A sensor on one checkpoint store (see :class:`CheckpointStoreMixin` for the parameters)."""

    template_fields: Sequence[str] = STORE_TEMPLATE_FIELDS

    def __init__(
        self,
        *,
        checkpoint_uri: str | None = None,
        spark_task_id: str | None = None,
        aws_conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self._set_store_params(checkpoint_uri, spark_task_id, aws_conn_id)
