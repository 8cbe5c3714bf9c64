"""``CheckpointHook``: a checkpoint store opened from Airflow's configuration and connections."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook
from airflow.sdk.log import mask_secret

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.hooks.connections import ConnectionLookup, task_connection
from airflow_ckpt_provider.hooks.output_anchor import OutputAnchor
from airflow_ckpt_provider.store import (
    CheckpointStore,
    ClearResult,
    Progress,
    open_store,
    public_options,
    secret_options,
)
from airflow_ckpt_provider.store.errors import InvalidArgumentError, StoreUnavailableError

# Every credential a hook of this process read. The UI scrubs them from what it shows
# (plugins/problems.py): Airflow's masker, which gets them too, redacts only logs publicly.
_SEEN_SECRETS: set[str] = set()


def endpoint_userinfo(endpoint_url: Any) -> list[str]:
    """The user-info of an endpoint URL (``user:password`` and each part): secrets to mask."""
    if not isinstance(endpoint_url, str) or "://" not in endpoint_url:
        return []
    authority = endpoint_url.split("://", 1)[1].split("/", 1)[0]
    if "@" not in authority:
        return []
    userinfo = authority.rsplit("@", 1)[0]
    return [userinfo, *(part for part in userinfo.split(":") if len(part) >= 4)]


def seen_secrets() -> frozenset[str]:
    """The store credentials any ``CheckpointHook`` of this process has read so far."""
    return frozenset(_SEEN_SECRETS)


log = logging.getLogger(__name__)


class CheckpointHook(BaseHook):
    """Opens the checkpoint store at ``checkpoint_uri``.

    ``file://`` or plain-path stores need no connection. For ``s3://`` stores the
    credentials, endpoint (connection extra ``endpoint_url``, for S3-compatible
    servers) and region come from the Amazon provider's ``aws`` connection
    ``aws_conn_id`` (default: the ``[ckpt] aws_conn_id`` option; empty means boto3's
    default chain: environment, instance profile, ...). A connection id that is set but
    not defined, or cannot be read, raises :class:`StoreUnavailableError` (``connection``): never a fall-back
    to the default chain (that is this process's own identity). ``connection_lookup`` reads
    connections (default: Airflow's task SDK; the command line passes the metadata DB's).
    Store timeouts and the breaker threshold come from the ``[ckpt]`` section.

    Secret values are registered with Airflow's log masker as soon as they are read.
    """

    hook_name = "Checkpoint store"

    def __init__(
        self,
        checkpoint_uri: str | None = None,
        aws_conn_id: str | None = None,
        config: CheckpointConfig | None = None,
        connection_lookup: ConnectionLookup = task_connection,
        output_anchor: OutputAnchor | None = None,
    ) -> None:
        super().__init__()
        self.config = config or CheckpointConfig.load()
        self.checkpoint_uri = checkpoint_uri
        self.aws_conn_id = aws_conn_id or self.config.aws_conn_id
        self._connection_lookup = connection_lookup
        #: The output roots the store is opened with (docs/security.md, "The trust model"); None: none.
        self.output_anchor = output_anchor

    def with_output_anchor(self, anchor: OutputAnchor | None) -> CheckpointHook:
        """This hook's store, opened with ``anchor``'s output roots (None: this hook itself)."""
        if anchor is None:
            return self
        return CheckpointHook(
            self.uri,
            aws_conn_id=self.aws_conn_id,
            config=self.config,
            connection_lookup=self._connection_lookup,
            output_anchor=anchor,
        )

    def with_trusted_output_roots(
        self, roots: Sequence[str] | None, declared_by: str = "output_roots"
    ) -> CheckpointHook:
        """This hook's store, opened with the output roots ``declared_by`` declares (None: this hook itself)."""
        return self if roots is None else self.with_output_anchor(OutputAnchor(tuple(roots), declared_by))

    @property
    def uri(self) -> str:
        if not self.checkpoint_uri or not self.checkpoint_uri.strip():
            raise InvalidArgumentError(
                "CheckpointHook needs a checkpoint_uri (file:///abs/dir, /abs/dir or s3://bucket/prefix); "
                "operators derive one from [ckpt] base_uri when none is given",
                reason="store_uri",
            )
        return self.checkpoint_uri.strip()

    @property
    def is_s3(self) -> bool:
        return self.uri.startswith(("s3://", "s3a://"))

    @cached_property
    def store_options(self) -> dict[str, Any]:
        """Every option ``open_store`` gets, secrets included: never log or push this."""
        options: dict[str, Any] = {"breaker_max_failures": self.config.breaker_max_failures}
        if not self.is_s3:
            return options
        options["timeout_seconds"] = self.config.store_timeout_seconds
        if self.aws_conn_id:
            options.update(self._aws_options(self.aws_conn_id))
        for value in [*secret_options(options).values(), *endpoint_userinfo(options.get("endpoint_url"))]:
            mask_secret(value)
            _SEEN_SECRETS.add(str(value))
        return options

    @property
    def public_store_options(self) -> dict[str, Any]:
        """The options without credentials: safe for logs, XCom and ``--conf``."""
        return public_options(self.store_options)

    @property
    def secret_store_options(self) -> dict[str, Any]:
        """Only the credentials (empty when boto3's default chain is used)."""
        return secret_options(self.store_options)

    def _aws_options(self, aws_conn_id: str) -> dict[str, Any]:
        # The connection is read here, strictly: the Amazon provider's hook would swallow a
        # missing one and fall back to the default credential chain.
        aws = _resolved_aws_hook(self._connection_lookup(aws_conn_id))
        options: dict[str, Any] = {}
        endpoint = aws.conn_config.get_service_endpoint_url("s3")
        if endpoint:
            options["endpoint_url"] = endpoint
        if aws.region_name:
            options["region_name"] = aws.region_name
        # get_credentials() also resolves role assumption into temporary keys, which is
        # what a Spark job on other machines needs: it cannot assume the role itself.
        try:
            credentials = aws.get_credentials()
        except AttributeError as exc:  # botocore found no credentials at all (None has no frozen copy)
            raise StoreUnavailableError(
                f"connection {aws_conn_id!r} holds no keys and boto3's default credential chain found none: "
                "put the access key and secret in the connection (login/password), or a role it can assume",
                reason="connection",
            ) from exc
        if credentials.access_key:
            options["aws_access_key_id"] = credentials.access_key
        if credentials.secret_key:
            options["aws_secret_access_key"] = credentials.secret_key
        if credentials.token:
            options["aws_session_token"] = credentials.token
        return options

    def get_conn(self) -> CheckpointStore:
        return self.get_store()

    @cached_property
    def _store(self) -> CheckpointStore:
        anchor = {} if self.output_anchor is None else self.output_anchor.store_options()
        return open_store(self.uri, **anchor, **self.store_options)

    def get_store(self) -> CheckpointStore:
        """The store (opened once per hook; nothing is created until the first write)."""
        return self._store

    def get_progress(self) -> Progress:
        """Epoch, sealed/expected partitions, keys done, committed or not (see ``Progress``)."""
        return self.get_store().inspection.progress()

    def clear(self) -> ClearResult:
        """Reset the store: the next run reprocesses every key; committed output is kept."""
        result = self.get_store().housekeeping.clear()
        self.log.info(
            "Cleared %s: %d checkpoints and %d uncommitted files deleted, %d bytes freed",
            self.uri,
            len(result.deleted_checkpoints),
            len(result.deleted_files),
            result.bytes_freed,
        )
        return result


def _resolved_aws_hook(connection: Any) -> Any:
    """The Amazon provider's hook over an already-read ``connection`` (it reads none itself)."""
    # Imported here: the Amazon provider is only needed for s3:// stores.
    from airflow.providers.amazon.aws.hooks.base_aws import AwsGenericHook
    from airflow.providers.amazon.aws.utils.connection_wrapper import AwsConnectionWrapper

    class _ResolvedAwsHook(AwsGenericHook):  # type: ignore[type-arg]
        @cached_property
        def conn_config(self) -> AwsConnectionWrapper:
            return AwsConnectionWrapper(conn=connection, region_name=None, botocore_config=None, verify=None)

    return _ResolvedAwsHook(aws_conn_id=connection.conn_id, client_type="s3")
