"""The provider's ``[ckpt]`` configuration section, typed (options and defaults: ``provider_info.py``).

Read once per task, at execute time, so a deployment changes behaviour through
``airflow.cfg`` or ``AIRFLOW__CKPT__*`` environment variables without touching DAGs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from airflow.sdk.configuration import conf

from airflow_ckpt_provider.provider_info import CONFIG_DEFAULTS, SECTION
from airflow_ckpt_provider.store import RetentionPolicy

_D = CONFIG_DEFAULTS

__all__ = ["SECTION", "CheckpointConfig", "airflow_home"]


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
    ui_store_deadline_seconds: float = float(_D["ui_store_deadline_seconds"])
    #: Clear and discard from the view may take this long (they delete; a page only reads).
    ui_action_deadline_seconds: float = float(_D["ui_action_deadline_seconds"])
    #: Store calls of the view running at once per API-server process.
    ui_max_concurrent_store_calls: int = int(_D["ui_max_concurrent_store_calls"])
    #: Previews and actions of the view running at once per process, on a pool of their own.
    ui_max_concurrent_actions: int = int(_D["ui_max_concurrent_actions"])
    #: Whether the view believes X-Forwarded-Host/-Proto (only behind a proxy that sets them).
    ui_trust_forwarded_headers: bool = _D["ui_trust_forwarded_headers"] == "True"
    #: Where a DAG declares no output roots: the store's recorded roots under these may be acted on
    #: (hooks/output_anchor.py). Empty: such DAGs' output files are kept.
    trusted_output_roots: tuple[str, ...] = ()

    @classmethod
    def load(cls) -> CheckpointConfig:
        """Read the section; options absent from the config get the provider's defaults."""

        def get(name: str) -> str:
            return str(conf.get(SECTION, name, fallback=_D[name]))

        def typed(getter: Any, name: str, parse: Any) -> Any:
            """``conf.getint``/``getfloat``/``getboolean`` of ``name``, with the declared default parsed."""
            return getter(SECTION, name, fallback=parse(_D[name]))

        def flag(text: str) -> bool:
            return text == "True"

        return cls(
            base_uri=get("base_uri").strip(),
            aws_conn_id=get("aws_conn_id").strip() or None,
            retention_policy=RetentionPolicy(get("retention_policy").strip().lower()),
            breaker_max_failures=typed(conf.getint, "breaker_max_failures", int),
            store_timeout_seconds=typed(conf.getfloat, "store_timeout_seconds", float),
            ui_store_deadline_seconds=typed(conf.getfloat, "ui_store_deadline_seconds", float),
            ui_action_deadline_seconds=typed(conf.getfloat, "ui_action_deadline_seconds", float),
            ui_max_concurrent_store_calls=typed(conf.getint, "ui_max_concurrent_store_calls", int),
            ui_max_concurrent_actions=typed(conf.getint, "ui_max_concurrent_actions", int),
            ui_trust_forwarded_headers=typed(conf.getboolean, "ui_trust_forwarded_headers", flag),
            trusted_output_roots=tuple(root.strip() for root in get("trusted_output_roots").split(",") if root.strip()),
        )

    @property
    def store_base(self) -> str:
        """``base_uri``, or with none the local ``$AIRFLOW_HOME/checkpoints``: where default locations are
        (hooks/locator.py, :func:`store_uri`)."""
        return self.base_uri.rstrip("/") if self.base_uri else os.path.join(airflow_home(), "checkpoints")
