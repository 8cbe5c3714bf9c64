"""The one module that uses the Spark provider beyond its public interface.

``CheckpointedSparkSubmitOperator`` (operators/spark_submit.py) needs what
``apache-airflow-providers-apache-spark`` 6.x has no public way to do: open the epoch right before
a *real* spark-submit (a durable re-attach submits nothing), give that submit the store's confs and
credentials, and read back what the submit left. The operator subclasses
:class:`SubmitHookOperator` and calls only its methods below. The private members it relies on,
and why (tests/operators/test_spark_provider_contract.py pins each one against the installed
provider's source, so an upgrade that renames or drops one fails there, not in a submit):

``SparkSubmitOperator``
  * ``_get_hook``: the one place ``execute`` builds its hook; overridden to rebuild that hook as
    :class:`_CheckpointedSubmitHook` by copying its ``__dict__`` (every field the provider resolved:
    connection, deploy mode, ...), so no constructor argument is repeated here.
  * ``_hook``: the hook ``execute`` submitted with (driver status, result line).
  * ``_connection`` of a hook it builds with ``_get_hook`` before the submit: the master and deploy
    mode the provider resolved (:meth:`SubmitHookOperator.spark_placement`), which decide whether a
    store on this host's disk can be used (hooks/store_visibility.py).
  * ``_conn_id``, ``_deploy_mode``, ``_yarn_track_via_rm_api``, ``_track_driver_via_k8s_api``: how a
    sensor reaches a detached driver (:meth:`SubmitHookOperator.driver_ref`).

``SparkSubmitHook``
  * ``submit(application, **kwargs)`` (public; ``kwargs`` go to ``subprocess.Popen``): every deploy
    mode submits through it, a durable re-attach never does, so the epoch is opened there.
  * ``_process_spark_submit_log``: tapped for the driver's ``CKPT_RESULT`` line (client mode).
  * ``_conf``: built from the operator's ``conf`` before the epoch exists; the store confs join it
    right before the submit.
  * ``_env_vars``: when set, the provider builds the child's environment from it alone (Popen's
    ``env`` is overridden), so the store credentials join it there.
  * ``_is_yarn``, ``_is_kubernetes``: there the provider turns ``env_vars`` into ``--conf`` flags
    (visible in ``ps``), so credentials are not passed.
  * ``_driver_status``: a cluster driver's last state, after a failed attempt.
"""

from __future__ import annotations

import abc
import os
from collections.abc import Callable, Iterator
from typing import Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

from airflow_ckpt_provider.contract import RESULT_LINE_PREFIX, Handoff, with_submit_defaults
from airflow_ckpt_provider.hooks.store_visibility import SparkPlacement
from airflow_ckpt_provider.triggers.driver import DriverRef


class _CheckpointedSubmitHook(SparkSubmitHook):
    """Calls back into the operator right before every real ``spark-submit`` run.

    Every deploy mode (client, standalone cluster, YARN, Kubernetes) submits through
    ``SparkSubmitHook.submit``; a durable re-attach never does. So this is the one
    place where "a new submit really happens" is known for sure.
    """

    _before_submit: Callable[[], Handoff] | None = None
    #: The driver's ``CKPT_RESULT`` line, when its stdout reaches spark-submit (client mode).
    result_line: str | None = None

    def _process_spark_submit_log(self, itr: Iterator[Any]) -> None:
        def tap() -> Iterator[Any]:
            for line in itr:
                text = str(line).strip()
                if RESULT_LINE_PREFIX in text:
                    self.result_line = text
                yield line

        super()._process_spark_submit_log(tap())

    def submit(self, application: str = "", **kwargs: Any) -> str | None:
        if self._before_submit is None:  # pragma: no cover - the operator always sets it
            raise RuntimeError("a checkpointed submit needs its operator's before_submit callback")
        handoff = self._before_submit()
        self._conf = {**with_submit_defaults(self._conf), **handoff.spark_conf()}
        secret_env = handoff.secret_env()
        if secret_env:
            if self._is_yarn or self._is_kubernetes:
                # The provider turns env_vars into --conf spark.yarn.appMasterEnv.* /
                # spark.kubernetes.driverEnv.* flags: visible in `ps`. Refuse to ship keys that way.
                self.log.warning(
                    "Not passing store credentials to a %s driver (they would be on the spark-submit "
                    "command line): give the cluster its own S3 credentials (instance role, IRSA, ...)",
                    "YARN" if self._is_yarn else "Kubernetes",
                )
            elif self._env_vars:
                # With env_vars the provider builds the child environment from _env_vars itself.
                self._env_vars = {**self._env_vars, **secret_env}
            else:
                kwargs["env"] = {**os.environ, **(kwargs.get("env") or {}), **secret_env}
        return super().submit(application, **kwargs)


class SubmitHookOperator(SparkSubmitOperator):
    """``SparkSubmitOperator`` that calls :meth:`before_submit` right before every real
    ``spark-submit`` and gives that submit the returned :class:`Handoff` (confs, credentials)."""

    @abc.abstractmethod
    def before_submit(self) -> Handoff:
        """Open the epoch of the submit about to start (called by the hook, once per real submit)."""

    def _get_hook(self) -> SparkSubmitHook:
        base = super()._get_hook()
        # Rebuild as our subclass with the same arguments: the base class builds its hook in
        # one place, and copying __dict__ keeps every resolved field (connection, deploy mode).
        hook = _CheckpointedSubmitHook.__new__(_CheckpointedSubmitHook)
        hook.__dict__.update(base.__dict__)
        hook._before_submit = self.before_submit
        return hook

    def spark_placement(self) -> SparkPlacement:
        """Where this submit's driver and executors will run: the master and deploy mode the provider
        resolves from the connection and the operator's arguments (a hook built for the purpose, so the
        submit's own hook still sees every conf added before it)."""
        connection = super()._get_hook()._connection
        return SparkPlacement.of_submit(str(connection["master"]), connection.get("deploy_mode"), self.conf)

    def last_driver_status(self) -> str:
        """The submitted cluster driver's last known state, upper-case ("" when none is known)."""
        hook = self._hook
        status = hook._driver_status if hook is not None else None
        return str(status or "").upper()

    def driver_result_line(self) -> str | None:
        """The driver's ``CKPT_RESULT`` line, when spark-submit printed it (client mode)."""
        return self._hook.result_line if isinstance(self._hook, _CheckpointedSubmitHook) else None

    def driver_ref(self, external_id: Any) -> DriverRef:
        """How a sensor asks the cluster whether the driver ``external_id`` is still there."""
        return DriverRef(
            conn_id=self._conn_id,
            external_id=str(external_id),
            deploy_mode=self._deploy_mode,
            yarn_track_via_rm_api=bool(self._yarn_track_via_rm_api),
            track_driver_via_k8s_api=bool(self._track_driver_via_k8s_api),
        )
