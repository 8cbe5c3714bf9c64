"""Where a store's Airflow connection is read from, and what happens when it cannot be.

A connection that is missing or unreadable is an error (:class:`StoreUnavailableError` (``connection``)),
never a silent fall-back to boto3's default credential chain: in the API server or on a
laptop that chain is somebody else's identity (the Amazon provider's own hook falls back
to it with a warning). Only an *unset* connection id means "use the default chain".

Two ways to read a connection:

* :func:`task_connection`: Airflow's task SDK (``BaseHook.get_connection``), right inside a
  running task (through the Execution API) and in Airflow's server processes.
* :func:`metadata_db_connection`: Airflow's server-side secrets chain, which includes the
  metadata DB. For processes that are neither (the ``airflow-ckpt`` command line): there
  the task SDK sees only ``AIRFLOW_CONN_*`` variables. When the connection is not found,
  the DB is probed so that the error says whether it was missing or the DB unreadable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_ckpt_provider.store.errors import StoreUnavailableError

#: Reads a connection by id; raises :class:`StoreUnavailableError` (``connection``).
ConnectionLookup = Callable[[str], Any]


def _env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def task_connection(conn_id: str) -> Any:
    """The connection through Airflow's task SDK (tasks, API server, scheduler)."""
    from airflow.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except Exception as exc:  # AirflowNotFoundException, or a secrets backend / DB failure
        raise StoreUnavailableError(
            f"no usable credentials from connection {conn_id!r}: {_reason(exc)}. Define the connection "
            f"(Admin -> Connections, a secrets backend, or {_env_name(conn_id)}) or fix the operator's "
            "aws_conn_id / [ckpt] aws_conn_id. Nothing was read or changed",
            reason="connection",
        ) from exc


def metadata_db_connection(conn_id: str) -> Any:
    """The connection through Airflow's server-side secrets chain (environment, secrets backends,
    metadata DB), for processes outside Airflow such as the command line."""
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(conn_id)
    except Exception as exc:
        problem = _metadata_db_problem()
        where = (
            f"it is not defined as {_env_name(conn_id)}, and Airflow's metadata DB {problem}"
            if problem
            else f"it is not defined: not as {_env_name(conn_id)}, not in a secrets backend, not in Airflow's "
            f"metadata DB ({_db_url()})"
        )
        raise StoreUnavailableError(
            f"no usable credentials from connection {conn_id!r}: {where}. Define it as {_env_name(conn_id)} "
            "(a JSON or URI connection), or run where Airflow's metadata DB holding it is configured "
            "(AIRFLOW_HOME / AIRFLOW__DATABASE__SQL_ALCHEMY_CONN)",
            reason="connection",
        ) from exc


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _db_url() -> str:
    """The metadata DB's URL without its password."""
    try:
        from airflow.configuration import conf
        from sqlalchemy.engine import make_url

        return str(make_url(conf.get("database", "sql_alchemy_conn")).render_as_string(hide_password=True))
    except Exception:  # a URL that does not parse names nothing useful
        return "<unreadable sql_alchemy_conn>"


def _metadata_db_problem() -> str | None:
    """Why the metadata DB cannot be read (one line), or None when it can."""
    try:
        from airflow.utils.session import create_session
        from sqlalchemy import text

        with create_session(scoped=False) as session:
            session.execute(text("SELECT 1 FROM connection WHERE 1 = 0"))
    except Exception as exc:  # no DB, not migrated, unreachable: all "cannot be read"
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return f"({_db_url()}) cannot be read ({first_line[:200]})"
    return None
