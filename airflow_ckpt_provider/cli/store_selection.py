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
from airflow_ckpt_provider.store.errors import CheckpointError, InvalidArgumentError, StoreUnavailableError


@dataclass(frozen=True)
class StoreTarget:
    uri: str | None
    dag_id: str | None = None
    task_id: str | None = None
    run_id: str | None = None
    map_index: int = -1
    aws_conn_id: str | None = None
    endpoint_url: str | None = None
    region: str | None = None
    timeout_seconds: float | None = None
    #: ``--output-root``: the output roots the person vouches for (docs/security.md, "The trust model").
    output_roots: tuple[str, ...] = ()

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
                raise InvalidArgumentError(
                    f"missing {', '.join(missing)}: a task instance's store needs all of "
                    "--dag-id, --task-id and --run-id",
                    reason="target",
                )
            if self.uri is not None:
                raise InvalidArgumentError(
                    "give either a store URI or --dag-id/--task-id/--run-id, not both", reason="target"
                )
        elif self.map_index != -1:
            raise InvalidArgumentError(
                "--map-index names a mapped task instance: give it with --dag-id/--task-id/--run-id", reason="target"
            )
        elif not self.uri:
            raise InvalidArgumentError(
                "no store given: pass a store URI (file:///path, /path or s3://bucket/prefix) "
                "or --dag-id, --task-id and --run-id",
                reason="target",
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


#: Who declares the output roots of a store named by its URI without ``--output-root``: nobody.
NO_OUTPUT_ROOT_GIVEN = "--output-root"


@dataclass(frozen=True)
class ResolvedTarget:
    """The store URI a target names, and the connection its task's operator names (if any)."""

    uri: str
    aws_conn_id: str | None = None
    source: str = "given on the command line"
    #: The output roots the store is opened with: the person's ``--output-root``, else the DAG's
    #: ``output_roots`` for a task instance, else none (empty: every output file is kept), or None
    #: when ``[ckpt] trusted_output_roots`` (``configured``) bounds the store's records instead.
    output_roots: tuple[str, ...] | None = ()
    #: Who declares ``output_roots`` (named when a deletion is refused).
    declared_by: str = NO_OUTPUT_ROOT_GIVEN
    configured: tuple[str, ...] | None = None

    def anchor_options(self) -> dict[str, Any]:
        """The ``open_store`` keyword arguments that anchor its deletions (docs/security.md)."""
        return {
            "trusted_output_roots": self.output_roots,
            "output_roots_declared_by": self.declared_by,
            "configured_output_roots": self.configured,
        }


def resolve_target(target: StoreTarget) -> ResolvedTarget:
    """The store ``target`` names. A task instance's store is the one its operator was configured
    with, read from Airflow's metadata DB (hooks/locator.py); without a readable DB, the
    ``[ckpt]`` default location (a note on stderr says so). Raises
    :class:`NotFoundError` (``store_location``)."""
    target.validate()
    given = target.output_roots or None
    if not target.names_task_instance:
        assert target.uri is not None
        if given is not None:
            return ResolvedTarget(target.uri, output_roots=given, declared_by="--output-root")
        return ResolvedTarget(target.uri)
    from airflow_ckpt_provider.hooks.declared_roots import declared_output_roots
    from airflow_ckpt_provider.hooks.default_location import JobIdentity
    from airflow_ckpt_provider.hooks.locator import configured_store, store_uri
    from airflow_ckpt_provider.hooks.task_fields import SOURCE_DEFAULT

    assert target.dag_id and target.task_id and target.run_id
    found = None
    # Without a readable DB the DAG's declaration is unknown: nothing is declared, so output files are kept.
    roots: tuple[str, ...] = given or ()
    try:
        from airflow.utils.session import create_session

        with create_session(scoped=False) as session:
            _check_map_index(session, target)
            found = configured_store(session, target.dag_id, target.task_id, target.run_id, map_index=target.map_index)
            if given is None:
                roots = declared_output_roots(session, target.dag_id, target.task_id, target.run_id, target.map_index)
    except CheckpointError:
        raise
    except Exception as exc:  # no metadata DB here (not configured, not migrated, unreachable)
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]
        sys.stderr.write(
            f"airflow-ckpt: note: Airflow's metadata DB cannot be read ({reason}): using the [ckpt] default "
            "location of a run without a logical date (run=<run id>); if the run has a logical date or its operator "
            "names a checkpoint_uri, pass the store URI instead\n"
        )
    anchor = _task_anchor(target, given, roots)
    if found is None:  # like the operator, without its run's logical date: the location of a run without one
        job = JobIdentity(target.dag_id, target.task_id, target.run_id, None, target.map_index)
        return ResolvedTarget(store_uri(None, job), None, SOURCE_DEFAULT, *anchor)
    return ResolvedTarget(found.uri, found.aws_conn_id, found.source, *anchor)


def _task_anchor(
    target: StoreTarget, given: tuple[str, ...] | None, declared: tuple[str, ...]
) -> tuple[tuple[str, ...] | None, str, tuple[str, ...] | None]:
    """(roots, declared by, configured roots) of a task instance's store: ``--output-root``, else
    the DAG's, else ``[ckpt] trusted_output_roots``, else none (hooks/output_anchor.py)."""
    if given is not None:
        return given, "--output-root", None
    from airflow_ckpt_provider.hooks.config import CheckpointConfig
    from airflow_ckpt_provider.hooks.locator import task_instance_anchor

    assert target.dag_id and target.task_id
    try:
        configured = CheckpointConfig.load().trusted_output_roots
    except Exception:  # no readable Airflow configuration: nothing configured
        configured = ()
    anchor = task_instance_anchor(target.dag_id, target.task_id, declared, configured)
    return anchor.trusted, anchor.declared_by, anchor.configured


def _check_map_index(session: Any, target: StoreTarget) -> None:
    """A mapped task has one store per map index: refuse to guess which (InvalidArgumentError("target"))."""
    from airflow_ckpt_provider.hooks.task_fields import task_instance_states
    from airflow_ckpt_provider.store.errors import NotFoundError

    assert target.dag_id and target.task_id and target.run_id
    try:
        states = task_instance_states(session, target.dag_id, target.task_id, target.run_id)
    except NotFoundError as exc:  # not in the DB (yet): the location is still the operator's default
        if exc.reason != "task_instance":
            raise
        return
    mapped = [m for m in states if m >= 0]
    if mapped and target.map_index not in states:
        raise InvalidArgumentError(
            f"task {target.task_id!r} is mapped in run {target.run_id!r} (map indexes {mapped[0]}..{mapped[-1]}), "
            "and each map index has its own store: pass --map-index I",
            reason="target",
        )
    if not mapped and target.map_index >= 0:
        raise InvalidArgumentError(
            f"task {target.task_id!r} is not mapped in run {target.run_id!r}: leave out --map-index", reason="target"
        )


def resolve_uri(target: StoreTarget) -> str:
    """The store URI of ``target`` (importing Airflow only for a task instance)."""
    return resolve_target(target).uri


def open_target(target: StoreTarget) -> CheckpointStore:
    """Open the store ``target`` names. Raises typed store errors for bad URIs.

    With Airflow involved (a task instance or ``--aws-conn-id``) the provider's hook
    supplies the options the operator would use ([ckpt] timeouts, the connection's
    credentials, endpoint and region); flags given here override them. Connections are
    read from the environment, the secrets backends and Airflow's metadata DB; one that
    is named but cannot be found is an error, never boto3's default chain.
    """
    if not (target.names_task_instance or target.aws_conn_id):
        plain = resolve_target(target)
        return open_store(plain.uri, **plain.anchor_options(), **target.store_options())
    # Airflow logs to stdout (e.g. "credentials retrieved"); stdout belongs to the result
    # (``--json`` must stay parseable), so Airflow's output goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        resolved = resolve_target(target)
        from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
        from airflow_ckpt_provider.hooks.connections import metadata_db_connection

        hook = CheckpointHook(
            checkpoint_uri=resolved.uri,
            aws_conn_id=target.aws_conn_id or resolved.aws_conn_id,
            connection_lookup=metadata_db_connection,
        )
        try:
            options = dict(hook.store_options)
        except CheckpointError:
            raise
        except Exception as exc:  # the credential chain failed in a way the hook does not know
            raise StoreUnavailableError(
                f"no usable credentials from connection {hook.aws_conn_id!r} ({type(exc).__name__}: {exc}); "
                "define it as AIRFLOW_CONN_<ID> with keys, or use AWS_* environment variables",
                reason="unreachable",
            ) from exc
    return open_store(resolved.uri, **resolved.anchor_options(), **(options | target.store_options()))
