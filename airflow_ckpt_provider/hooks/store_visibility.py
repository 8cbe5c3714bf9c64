"""Whether every process that reads a task's store can see it: a store on one host's disk is refused
before anything runs where another host must read it (docs/deployment.md).

A store is read and written by the worker that runs each try of the Spark task, by the Spark driver
and executors, by the workers of the commit, clear and sensor tasks, by the triggerer (the deferrable
sensor), by the API server (the Checkpoints tab) and by ``airflow-ckpt``. The embedded default —
``$AIRFLOW_HOME/checkpoints`` when neither ``checkpoint_uri`` nor ``[ckpt] base_uri`` names a store —
is on the local disk of whichever process opens it, so it works only where they all share that disk:

* Airflow runs this task, and every task of its DAG that works on its store, in a process of this
  host: the ``LocalExecutor`` (``airflow standalone`` forces it), or ``airflow dags test`` / ``tasks
  test``, which run the tasks in their own process;
* Spark runs the driver on this host (client deploy mode) and the executors too (a ``local`` master),
  or is a Spark Connect server on this host (``localhost``) whose own master is local.

Anywhere else — another executor (Celery, Kubernetes, Edge, ECS, ... or a custom one), a task sent to
one of them with ``executor=``, a cluster master (``spark://``, ``yarn``, ``k8s://``), cluster deploy
mode, a Spark Connect server on another host — a retry on another worker would find an empty store
and start again, the commit would find nothing to commit, and the executors would write "local"
checkpoints on their own disks: :func:`refuse_unshared_default` raises
:class:`InvalidArgumentError` (``store_not_shared``) naming what to set, before spark-submit or the
Spark session.

A location the deployment names — ``checkpoint_uri``, or ``[ckpt] base_uri``, ``file://`` included —
is its word that every process reaches the same store there (a shared file system: the same path on
every host, atomic create-if-absent), and is not second-guessed.

Which executor runs a task is read from Airflow's ``[core] executor`` (a comma-separated list, the
first the default; per team with ``multi_team``) and the task's ``executor=``, as the scheduler
chooses. That ``dags test`` runs the task in its own process is read from the in-process supervisor's
``__AIRFLOW_SUPERVISOR_FD`` variable (Airflow's task SDK sets it only while such a run executes a
task; tests/hooks/test_store_visibility.py pins it with a real ``dag.test()`` run).
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlparse

from airflow_ckpt_provider.hooks.config import CheckpointConfig
from airflow_ckpt_provider.store.errors import InvalidArgumentError

#: Airflow's core executors by the name ``[core] executor`` may give them (airflow.executors.executor_loader).
CORE_EXECUTORS = {
    "LocalExecutor": "airflow.executors.local_executor.LocalExecutor",
    "CeleryExecutor": "airflow.providers.celery.executors.celery_executor.CeleryExecutor",
    "KubernetesExecutor": "airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor",
}
#: The executors that run a task in a process of the scheduler's host (Airflow 3 has one).
LOCAL_EXECUTORS = frozenset({CORE_EXECUTORS["LocalExecutor"]})
#: Set by Airflow's in-process supervisor (``dag.test()``, ``airflow tasks test``) while it runs a task.
IN_PROCESS_VARIABLE = "__AIRFLOW_SUPERVISOR_FD"

_LOCAL_MASTER = re.compile(r"local(\[[^\]]*\])?|local-cluster\[[^\]]*\]")
_LOOPBACK_NAMES = frozenset({"localhost", "ip6-localhost", "ip6-loopback"})


# ---------------------------------------------------------------- Spark


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` names this machine only (``localhost``, ``127.0.0.0/8``, ``::1``)."""
    if not host:
        return False
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class SparkPlacement:
    """Where a checkpointed job's driver and executors run, as far as the task can tell before it starts.

    :param master: the Spark master (``local[2]``, ``spark://host:7077``, ``yarn``, ``k8s://...``);
        None for a Spark Connect server whose master is not known yet.
    :param deploy_mode: ``client`` (the driver runs in the submitting process) or ``cluster``.
    :param connect_url: the Spark Connect server (``sc://host:port``) the session is a client of.
    """

    master: str | None
    deploy_mode: str = "client"
    connect_url: str | None = None

    @classmethod
    def of_submit(cls, master: str, deploy_mode: str | None, conf: Mapping[str, Any] | None) -> SparkPlacement:
        """A ``spark-submit`` to ``master``: its deploy mode as the submit operator's connection or
        argument says, else as ``conf`` (``spark.submit.deployMode``) does; Spark's default is client."""
        mode = deploy_mode or str((conf or {}).get("spark.submit.deployMode") or "") or "client"
        return cls(master=master.strip(), deploy_mode=mode.strip().lower())

    @classmethod
    def of_session(cls, url: str, confs: Mapping[str, Any]) -> SparkPlacement:
        """A session built in the worker the way the Spark provider's ``PySparkOperator`` builds it:
        ``url`` from its connection (``local[*]`` without one), ``confs`` its connection's extras then
        ``config_kwargs`` (``spark.remote`` or ``spark.master`` there win)."""
        remote = str(confs.get("spark.remote") or (url if url.startswith("sc://") else "")) or None
        if remote is not None:
            return cls(master=None, connect_url=remote)
        return cls(master=str(confs.get("spark.master") or url).strip())

    def with_server_master(self, master: str) -> SparkPlacement:
        """This Spark Connect placement, its server's own master now known (read from the session)."""
        return replace(self, master=master.strip())

    def elsewhere(self) -> str | None:
        """What of the job runs on another host than this task, or None when all of it runs here
        (a Spark Connect server on this host whose master is not known yet counts as here)."""
        if self.connect_url is not None:
            host = urlparse(self.connect_url.replace("sc://", "http://", 1)).hostname
            if not is_loopback(host):
                return f"its Spark Connect server {self.connect_url} runs the driver and executors on {host}"
            if self.master is None:
                return None
            if not _LOCAL_MASTER.fullmatch(self.master):
                return (
                    f"its Spark Connect server {self.connect_url} runs its executors on the cluster of "
                    f"master {self.master}"
                )
            return None
        master = self.master or ""
        if self.deploy_mode == "cluster":
            return f"deploy mode cluster runs the driver on a host of the cluster of master {master}"
        if not _LOCAL_MASTER.fullmatch(master):
            return f"master {master} runs the executors on the cluster's hosts"
        return None


# ---------------------------------------------------------------- Airflow's executors


@dataclass(frozen=True)
class ExecutorName:
    """One entry of ``[core] executor``: ``LocalExecutor``, ``my.module.MyExecutor`` or ``alias:path``."""

    written: str
    alias: str | None
    path: str

    @classmethod
    def parse(cls, entry: str) -> ExecutorName:
        entry = entry.strip()
        alias, _, name = entry.rpartition(":") if ":" in entry else ("", "", entry)
        return cls(written=entry, alias=alias.strip() or None, path=CORE_EXECUTORS.get(name.strip(), name.strip()))

    def named_by(self, name: str) -> bool:
        """Whether a task's ``executor=`` names this one (by alias, core name, module path or class name)."""
        return name in {self.written, self.alias, self.path, self.path.rsplit(".", 1)[-1]}

    @property
    def is_local(self) -> bool:
        return self.path in LOCAL_EXECUTORS

    def describe(self) -> str:
        return self.alias or self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class ExecutorConfig:
    """``[core] executor`` as the scheduler reads it: the global list (its first is the default) and,
    with ``[core] multi_team``, each team's list (``LocalExecutor;team_a=CeleryExecutor``)."""

    global_executors: tuple[ExecutorName, ...]
    team_executors: Mapping[str, tuple[ExecutorName, ...]]

    @classmethod
    def parse(cls, text: str, multi_team: bool = False) -> ExecutorConfig:
        global_executors: tuple[ExecutorName, ...] = ()
        teams: dict[str, tuple[ExecutorName, ...]] = {}
        for part in (text or "LocalExecutor").split(";"):
            team, _, names = part.partition("=") if "=" in part and not part.startswith("=") else ("", "", part)
            executors = tuple(ExecutorName.parse(n) for n in names.strip("=").split(",") if n.strip())
            if not team:
                global_executors = global_executors or executors
            elif multi_team:
                teams[team.strip()] = executors
        return cls(global_executors or (ExecutorName.parse("LocalExecutor"),), teams)

    @classmethod
    def load(cls) -> ExecutorConfig:
        """Airflow's configuration as this process reads it (every component reads the same file)."""
        from airflow.sdk.configuration import conf

        return cls.parse(
            str(conf.get("core", "executor", fallback="LocalExecutor")),
            conf.getboolean("core", "multi_team", fallback=False),
        )

    def of_task(self, executor: str | None, team: str | None = None) -> ExecutorName:
        """The executor a task with ``executor=`` (None: the default) runs on, in ``team``'s DAGs."""
        candidates = (*self.team_executors.get(team or "", ()), *self.global_executors)
        if executor:
            for each in candidates:
                if each.named_by(executor):
                    return each
            return ExecutorName.parse(executor)  # not configured: the scheduler refuses it anyway
        return candidates[0]


def store_readers(task: Any) -> list[Any]:
    """``task`` and the tasks of its DAG that work on its store: every task naming it as
    ``spark_task_id`` without a ``checkpoint_uri`` of its own (commit, clear, sensor, reprocess)."""
    readers = [task]
    dag = getattr(task, "dag", None)
    for other in getattr(dag, "tasks", ()) if dag is not None else ():
        if other is task:
            continue
        partial = getattr(other, "partial_kwargs", None)
        fields = partial if isinstance(partial, Mapping) else vars(other)
        if fields.get("spark_task_id") == task.task_id and not fields.get("checkpoint_uri"):
            readers.append(other)
    return readers


def runs_in_process() -> bool:
    """Whether this task runs in the process that started it (``dags test``, ``tasks test``): its tries
    and the DAG's other tasks then run here too."""
    return bool(os.environ.get(IN_PROCESS_VARIABLE))


# ---------------------------------------------------------------- the refusal


def is_embedded_default(checkpoint_uri: str | None, config: CheckpointConfig) -> bool:
    """Whether the task's store is the embedded default: neither ``checkpoint_uri`` nor ``[ckpt] base_uri``."""
    return not (checkpoint_uri and checkpoint_uri.strip()) and not config.base_uri


def unshared_reasons(
    readers: Iterable[tuple[str, str | None]],
    placement: SparkPlacement | None,
    executors: ExecutorConfig,
    *,
    team: str | None = None,
    in_process: bool = False,
) -> list[str]:
    """Why a store on this host's disk would not be seen by every process that must read it ([]: it would).

    ``readers``: (task id, its ``executor=`` argument) of the Spark task and of each task working on its store.
    """
    reasons = []
    if not in_process:
        for task_id, executor in readers:
            chosen = executors.of_task(executor, team)
            if not chosen.is_local:
                how = f"executor={executor!r}" if executor else "the default executor"
                reasons.append(
                    f"task {task_id!r} runs on {chosen.describe()} ({how}), whose workers have disks of their own"
                )
    spark = placement.elsewhere() if placement is not None else None
    if spark is not None:
        reasons.append(spark)
    return reasons


def refuse_unshared_default(
    task: Any,
    context: Mapping[str, Any],
    store_uri: str,
    placement: SparkPlacement | None,
    config: CheckpointConfig,
    executors: ExecutorConfig | None = None,
) -> None:
    """Raise :class:`InvalidArgumentError` (``store_not_shared``) when ``task``'s store is the embedded
    default (``store_uri``, on this host's disk) and a process on another host must read it (see the
    module docstring). Reads no store and starts nothing; a store the deployment names passes."""
    if not is_embedded_default(getattr(task, "checkpoint_uri", None), config):
        return
    dag_run = context.get("dag_run")
    team = getattr(dag_run, "team_name", None)
    readers = [(t.task_id, getattr(t, "executor", None)) for t in store_readers(task)]
    reasons = unshared_reasons(
        readers, placement, executors or ExecutorConfig.load(), team=team, in_process=runs_in_process()
    )
    if reasons:
        raise not_shared_error(f"{task.dag_id}.{task.task_id}", store_uri, reasons)


def not_shared_error(who: str, store_uri: str, reasons: Sequence[str]) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"{who}: its checkpoint store would be the embedded default {store_uri} (no checkpoint_uri, [ckpt] "
        f"base_uri empty), on this host's disk only, but {'; and '.join(reasons)}. A retry on another host "
        "would find no checkpoints and start again, and the commit would find nothing to commit. Set "
        "[ckpt] base_uri = s3://bucket/prefix (AIRFLOW__CKPT__BASE_URI, for every worker, the triggerer and "
        "the API server), or checkpoint_uri on this task; a shared file system named there "
        "(file:///mnt/shared/checkpoints: the same path on every host) is taken as shared. Nothing was "
        "submitted or written (docs/deployment.md)",
        reason="store_not_shared",
    )
