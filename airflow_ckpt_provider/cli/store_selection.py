"""Which store a command works on: a URI, or an Airflow task instance's default store.

A plain URI needs nothing from Airflow, so the tool runs on a laptop with only the
store's dependencies. Airflow is imported only to turn ``--dag-id/--task-id/--run-id``
into the store URI the operator would use, or ``--aws-conn-id`` into credentials.
Credentials never come from flags (they would show in ``ps``): boto3 reads them from
the environment (``AWS_ACCESS_KEY_ID``, ``AWS_PROFILE``, …) or an Airflow connection.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider.store import CheckpointStore, open_store
from airflow_ckpt_provider.store.errors import CheckpointError, StoreUnavailableError


class TargetError(CheckpointError):
    """The command line does not name exactly one store."""


@dataclass(frozen=True)
class StoreTarget:
    uri: str | None
    dag_id: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    aws_conn_id: str | None = None
    endpoint_url: str | None = None
    region: str | None = None
    timeout_seconds: float | None = None

    @property
    def names_task_instance(self) -> bool:
        return any(v is not None for v in (self.dag_id, self.task_id, self.run_id))

    def validate(self) -> None:
        if self.names_task_instance:
            missing = [
                flag
                for flag, value in (
                    ("--dag-id", self.dag_id),
                    ("--task-id", self.task_id),
                    ("--run-id", self.run_id),
                )
                if not value
            ]
            if missing:
                raise TargetError(
                    f"missing {', '.join(missing)}: a task instance's store needs all of "
                    "--dag-id, --task-id and --run-id"
                )
            if self.uri is not None:
                raise TargetError("give either a store URI or --dag-id/--task-id/--run-id, not both")
        elif not self.uri:
            raise TargetError(
                "no store given: pass a store URI (file:///path, /path or s3://bucket/prefix) "
                "or --dag-id, --task-id and --run-id"
            )

    def store_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        if self.region:
            options["region_name"] = self.region
        if self.timeout_seconds is not None:
            options["timeout_seconds"] = self.timeout_seconds
        return options


def resolve_uri(target: StoreTarget) -> str:
    """The store URI of ``target`` (importing Airflow only for a task instance)."""
    target.validate()
    if not target.names_task_instance:
        assert target.uri is not None
        return target.uri
    from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook

    assert target.dag_id and target.task_id and target.run_id
    return CheckpointHook.resolve_uri(None, dag_id=target.dag_id, task_id=target.task_id, run_id=target.run_id)


def open_target(target: StoreTarget) -> CheckpointStore:
    """Open the store ``target`` names. Raises typed store errors for bad URIs.

    With Airflow involved (a task instance or ``--aws-conn-id``) the provider's hook
    supplies the options the operator would use ([ckpt] timeouts, the connection's
    credentials, endpoint and region); flags given here override them.
    """
    if not (target.names_task_instance or target.aws_conn_id):
        return open_store(resolve_uri(target), **target.store_options())
    # Airflow logs to stdout (e.g. "credentials retrieved"); stdout belongs to the result
    # (``--json`` must stay parseable), so Airflow's output goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        uri = resolve_uri(target)
        from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook

        hook = CheckpointHook(checkpoint_uri=uri, aws_conn_id=target.aws_conn_id)
        try:
            options = dict(hook.store_options)
        except CheckpointError:
            raise
        except Exception as exc:  # the connection or the credential chain failed
            raise StoreUnavailableError(
                f"no usable credentials from connection {hook.aws_conn_id!r} ({type(exc).__name__}: {exc}); "
                "define it as AIRFLOW_CONN_<ID> with keys, or use AWS_* environment variables"
            ) from exc
    return open_store(uri, **(options | target.store_options()))
