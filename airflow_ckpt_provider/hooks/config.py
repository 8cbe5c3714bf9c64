"""The provider's ``[ckpt]`` configuration section (declared in ``provider_info.py``).

Read once per task, at execute time, so a deployment changes behaviour through
``airflow.cfg`` or ``AIRFLOW__CKPT__*`` environment variables without touching DAGs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from airflow.sdk.configuration import conf

from airflow_ckpt_provider.store import RetentionPolicy

SECTION = "ckpt"

# run ids hold ':' and '+' (manual__2024-01-01T00:00:00+00:00): fine on a local disk but
# awkward in S3 keys and URLs, so the default location spells them with '_' instead.
_UNSAFE_SEGMENT = re.compile(r"[^A-Za-z0-9._-]+")


def airflow_home() -> str:
    """``$AIRFLOW_HOME`` as Airflow resolves it (default ``~/airflow``)."""
    return os.path.expanduser(os.path.expandvars(os.environ.get("AIRFLOW_HOME", "~/airflow")))


def path_segment(value: str) -> str:
    """``value`` made safe as one path segment of a store URI."""
    cleaned = _UNSAFE_SEGMENT.sub("_", value).strip("._")
    return cleaned or "_"


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
    #: Whether the view believes X-Forwarded-Host/-Proto (only behind a proxy that sets them).
    ui_trust_forwarded_headers: bool = False

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
            ui_trust_forwarded_headers=conf.getboolean(SECTION, "ui_trust_forwarded_headers", fallback=False),
        )

    def default_store_uri(self, dag_id: str, task_id: str, run_id: str) -> str:
        """One store per (dag, task, run): ``{base_uri}/{dag_id}/{task_id}/{run_id}``.

        With no ``base_uri`` the store is local, under ``$AIRFLOW_HOME/checkpoints``.
        """
        segments = "/".join(path_segment(s) for s in (dag_id, task_id, run_id))
        base = self.base_uri.rstrip("/") if self.base_uri else os.path.join(airflow_home(), "checkpoints")
        return f"{base}/{segments}"
