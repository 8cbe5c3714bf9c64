"""The provider's ``[ckpt]`` configuration section (declared in ``provider_info.py``).

Read once per task, at execute time, so a deployment changes behaviour through
``airflow.cfg`` or ``AIRFLOW__CKPT__*`` environment variables without touching DAGs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from airflow.sdk.configuration import conf

from airflow_ckpt_provider.hooks.default_location import JobIdentity, default_location, path_segment
from airflow_ckpt_provider.store import RetentionPolicy

SECTION = "ckpt"

__all__ = ["SECTION", "CheckpointConfig", "airflow_home", "path_segment"]


def airflow_home() -> str:
    """``$AIRFLOW_HOME`` as Airflow resolves it (default ``~/airflow``)."""
    return os.path.expanduser(os.path.expandvars(os.environ.get("AIRFLOW_HOME", "~/airflow")))


@dataclass(frozen=True)
class CheckpointConfig:
    """The ``[ckpt]`` options, typed."""

    base_uri: str
    aws_conn_id: str | None
    retention_policy: RetentionPolicy
    breaker_max_failures: int
    store_timeout_seconds: float
    #: The Checkpoints view (plugins/store_calls.py): a page answers within this many seconds.
    ui_store_deadline_seconds: float = 5.0
    #: Clear and discard from the view may take this long (they delete; a page only reads).
    ui_action_deadline_seconds: float = 120.0
    #: Store calls of the view running at once per API-server process.
    ui_max_concurrent_store_calls: int = 4
    #: Previews and actions of the view running at once per process, on a pool of their own.
    ui_max_concurrent_actions: int = 2
    #: Whether the view believes X-Forwarded-Host/-Proto (only behind a proxy that sets them).
    ui_trust_forwarded_headers: bool = False
    #: Where a DAG declares no output roots: the store's recorded roots under these may be acted on
    #: (hooks/output_anchor.py). Empty: such DAGs' output files are kept.
    trusted_output_roots: tuple[str, ...] = ()

    @classmethod
    def load(cls) -> CheckpointConfig:
        """Read the section; options absent from the config get the provider's defaults."""
        return cls(
            base_uri=conf.get(SECTION, "base_uri", fallback="").strip(),
            aws_conn_id=conf.get(SECTION, "aws_conn_id", fallback="").strip() or None,
            retention_policy=RetentionPolicy(
                conf.get(SECTION, "retention_policy", fallback=RetentionPolicy.DELETE_AFTER_SUCCESS.value)
                .strip()
                .lower()
            ),
            breaker_max_failures=conf.getint(SECTION, "breaker_max_failures", fallback=3),
            store_timeout_seconds=conf.getfloat(SECTION, "store_timeout_seconds", fallback=10.0),
            ui_store_deadline_seconds=conf.getfloat(SECTION, "ui_store_deadline_seconds", fallback=5.0),
            ui_action_deadline_seconds=conf.getfloat(SECTION, "ui_action_deadline_seconds", fallback=120.0),
            ui_max_concurrent_store_calls=conf.getint(SECTION, "ui_max_concurrent_store_calls", fallback=4),
            ui_max_concurrent_actions=conf.getint(SECTION, "ui_max_concurrent_actions", fallback=2),
            ui_trust_forwarded_headers=conf.getboolean(SECTION, "ui_trust_forwarded_headers", fallback=False),
            trusted_output_roots=tuple(
                root.strip()
                for root in conf.get(SECTION, "trusted_output_roots", fallback="").split(",")
                if root.strip()
            ),
        )

    @property
    def store_base(self) -> str:
        """``base_uri``, or with none the local ``$AIRFLOW_HOME/checkpoints``."""
        return self.base_uri.rstrip("/") if self.base_uri else os.path.join(airflow_home(), "checkpoints")

    def default_store_uri(self, job: JobIdentity) -> str:
        """One store per job: ``{base}/{dag_id}/{task_id}/date={logical date}`` (or ``run={run_id}``
        for a run without a logical date), ``.../map_index={i}`` for mapped instance ``i``
        (spelled as ``default_location.py`` says)."""
        return default_location(self.store_base, job)
