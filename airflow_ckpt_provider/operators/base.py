"""``CheckpointStoreBaseOperator``: the base of the operators that work on a store after (or instead of) a submit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_ckpt_provider.hooks.store_location import STORE_TEMPLATE_FIELDS, CheckpointStoreMixin


class CheckpointStoreBaseOperator(BaseOperator, CheckpointStoreMixin):
    """An operator on one checkpoint store (see :class:`CheckpointStoreMixin` for the parameters).

    A subclass declares its own parameters and passes the rest on, e.g.
    ``def __init__(self, *, foo, **kwargs): super().__init__(**kwargs)``; its ``template_fields``
    come from ``store_template_fields("foo", ...)``.
    """

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
