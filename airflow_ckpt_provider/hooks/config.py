"""The provider's ``[ckpt]`` configuration section, typed (options and defaults: ``provider_info.py``).

Read once per task, at execute time, so a deployment changes behaviour through
``airflow.cfg`` or ``AIRFLOW__CKPT__*`` environment variables without touching DAGs.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from airflow.sdk.configuration import conf

from airflow_ckpt_provider.provider_info import CONFIG_OPTIONS, SECTION
from airflow_ckpt_provider.store import RetentionPolicy

__all__ = ["SECTION", "CheckpointConfig", "airflow_home"]

#: Airflow's config type of an option -> its getter on ``conf``, and how the declared default (a string) parses.
_READERS: dict[str, tuple[str, Any]] = {
    "string": ("get", str),
    "integer": ("getint", int),
    "float": ("getfloat", float),
    "boolean": ("getboolean", lambda text: text == "True"),
}
_OPTIONS = {option.name: option for option in CONFIG_OPTIONS}


def _default(name: str) -> Any:
    """The declared default of ``name`` (``provider_info.CONFIG_OPTIONS``), typed."""
    option = _OPTIONS[name]
    return _READERS[option.type][1](option.default)


def _read(name: str) -> Any:
    """The option ``name`` as the deployment sets it, else its declared default, typed."""
    getter = _READERS[_OPTIONS[name].type][0]
    return getattr(conf, getter)(SECTION, name, fallback=_default(name))


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
    ui_store_deadline_seconds: float = _default("ui_store_deadline_seconds")
    #: Clear and discard from the view may take this long (they delete; a page only reads).
    ui_action_deadline_seconds: float = _default("ui_action_deadline_seconds")
    #: Store calls of the view running at once per API-server process.
    ui_max_concurrent_store_calls: int = _default("ui_max_concurrent_store_calls")
    #: Previews and actions of the view running at once per process, on a pool of their own.
    ui_max_concurrent_actions: int = _default("ui_max_concurrent_actions")
    #: Whether the view believes X-Forwarded-Host/-Proto (only behind a proxy that sets them).
    ui_trust_forwarded_headers: bool = _default("ui_trust_forwarded_headers")
    #: Where a DAG declares no output roots: the store's recorded roots under these may be acted on
    #: (hooks/output_anchor.py). Empty: such DAGs' output files are kept.
    trusted_output_roots: tuple[str, ...] = ()

    @classmethod
    def load(cls) -> CheckpointConfig:
        """Read the section; options absent from the config get the provider's defaults."""

        def text(name: str) -> str:
            return str(_read(name)).strip()

        return cls(
            base_uri=text("base_uri"),
            aws_conn_id=text("aws_conn_id") or None,
            retention_policy=RetentionPolicy(text("retention_policy").lower()),
            breaker_max_failures=_read("breaker_max_failures"),
            store_timeout_seconds=_read("store_timeout_seconds"),
            ui_store_deadline_seconds=_read("ui_store_deadline_seconds"),
            ui_action_deadline_seconds=_read("ui_action_deadline_seconds"),
            ui_max_concurrent_store_calls=_read("ui_max_concurrent_store_calls"),
            ui_max_concurrent_actions=_read("ui_max_concurrent_actions"),
            ui_trust_forwarded_headers=_read("ui_trust_forwarded_headers"),
            trusted_output_roots=tuple(
                root.strip() for root in text("trusted_output_roots").split(",") if root.strip()
            ),
        )

    @property
    def store_base(self) -> str:
        """``base_uri``, or with none the local ``$AIRFLOW_HOME/checkpoints``: where default locations are
        (hooks/locator.py, :func:`store_uri`)."""
        return self.base_uri.rstrip("/") if self.base_uri else os.path.join(airflow_home(), "checkpoints")
