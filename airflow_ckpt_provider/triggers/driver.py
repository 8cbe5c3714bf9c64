"""Is the Spark driver of a detached submit still there? Asked the way the Spark provider asks.

A ``CheckpointedSparkSubmitOperator`` with ``wait_for_completion=False`` returns once the
cluster accepted the driver; a sensor then watches the store. If the driver dies (killed,
out of memory, a port it cannot bind), the store stops moving and nothing else would tell
the sensor. :class:`DriverRef` is what the submit records (XCom ``driver``) so that a sensor
or trigger can ask the launcher for the driver's state: the Spark provider's own status call
(``SparkSubmitOperator.get_job_status``, what its durable re-attach polls: the standalone
master's REST status, YARN's ResourceManager, the Kubernetes driver pod), built from the same
connection and deploy mode. Where that cannot answer (client mode, no REST server, an error),
callers fall back on ``no_progress_timeout``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class DriverRef:
    """The driver a detached submit handed to the cluster, and how to reach its launcher."""

    conn_id: str
    external_id: str
    deploy_mode: str | None = None
    yarn_track_via_rm_api: bool = False
    track_driver_via_k8s_api: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping[str, Any] | None) -> DriverRef | None:
        """The ref a submit recorded, or None (an older or attached submit records none)."""
        if not isinstance(value, Mapping) or not value.get("conn_id") or not value.get("external_id"):
            return None
        return cls(
            conn_id=str(value["conn_id"]),
            external_id=str(value["external_id"]),
            deploy_mode=value.get("deploy_mode"),
            yarn_track_via_rm_api=bool(value.get("yarn_track_via_rm_api")),
            track_driver_via_k8s_api=bool(value.get("track_driver_via_k8s_api")),
        )


@dataclass(frozen=True)
class DriverState:
    """The launcher's answer: its own word for the state, and what it means."""

    status: str
    active: bool
    succeeded: bool

    @property
    def gone(self) -> bool:
        """The driver ended without success: nothing more will reach the store."""
        return not self.active and not self.succeeded


def driver_state(ref: DriverRef) -> DriverState:
    """Ask the launcher once. Blocking (HTTP, the Kubernetes API): call it from a thread.

    Raises whatever the provider's status call raises (unreachable master, unknown driver):
    the caller decides whether that is worth failing for.
    """
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator

    # The provider keeps its status call on the operator (one backend per deploy mode); an
    # operator built from the submit's connection and deploy mode asks exactly as its retry would.
    asker = SparkSubmitOperator(
        task_id="ckpt_driver_status",
        conn_id=ref.conn_id,
        deploy_mode=ref.deploy_mode,
        yarn_track_via_rm_api=ref.yarn_track_via_rm_api,
        track_driver_via_k8s_api=ref.track_driver_via_k8s_api,
    )
    status = str(asker.get_job_status(ref.external_id, {}))  # type: ignore[arg-type]
    return DriverState(status=status, active=asker.is_job_active(status), succeeded=asker.is_job_succeeded(status))
