"""``CheckpointStoreBaseOperator``: the base of the operators that work on a store after (or instead of) a submit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseOperator

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.hooks.store_location import STORE_TEMPLATE_FIELDS, CheckpointStoreMixin

#: Output files a task's XCom lists by name when it keeps them (the count is always there).
KEPT_LISTED = 100


def as_bool(value: Any) -> bool:
    """A flag parameter: a templated flag renders to a string ("True", "false", "0", "")."""
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def kept_output(hook: CheckpointHook, kept: Sequence[str]) -> dict[str, Any]:
    """What a task's result says about output files it kept because nothing declares an output
    root: why (None when something does), how many, and the first ``KEPT_LISTED`` of them."""
    anchor = hook.output_anchor
    return {
        "output_kept_because": anchor.warning("output_roots") if anchor is not None and anchor.keeps_output else None,
        "output_files_kept": list(kept[:KEPT_LISTED]),
    }


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
