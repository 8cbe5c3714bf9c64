"""Store-fault trials: the S3 store behind the TCP proxy fails while the job writes.

The job's store traffic goes through :class:`ckpt_testkit.faultproxy.FaultProxy`
(output on local disk, so only the *store* fails). Once the write stage has begun
(the driver recorded its expected partition count), the proxy starts resetting
connections, stalling past the store timeout, or answering 500/503 — or the job's
own S3 identity is deleted on the server. Promises checked:

* the job still completes (the circuit breaker takes the store off its path);
* a run that reports ``degraded=False`` sealed every partition, and then the
  strict audit applies (every file announced, keys exact);
* the commit (``degraded`` from the job's result, run later by the operator with
  its own credentials) deletes nothing from a run whose every task succeeded, and
  the full audit holds: every row once, nothing orphaned or unexplained.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.store import EpochStatus, open_store
from ckpt_testkit.faultproxy import FaultProxy
from ckpt_testkit.faults.campaign import CampaignReport, TrialResult
from ckpt_testkit.faults.identities import Identity, SeaweedIdentities
from ckpt_testkit.faults.oracle import audit_after_commit
from ckpt_testkit.faults.plans import StoreFaultPlan
from ckpt_testkit.faults.processes import SparkHost
from ckpt_testkit.faults.workload import OutputLocation, inputs_of_round
from ckpt_testkit.seaweed import SeaweedServer

#: Short timeouts and no retries: a faulted request fails at once and counts for the breaker.
JOB_STORE_TUNING = {"timeout_seconds": 1.5, "max_attempts": 1, "breaker_max_failures": 3}
#: Each write task pauses a little, so a fault that starts in the write stage meets store calls.
SLOW_TASKS = "spark.task.before_write=sleep:0.3@*"


@dataclass
class S3Target:
    server: SeaweedServer
    bucket: str

    @property
    def admin_options(self) -> dict[str, Any]:
        return self.server.options()


class _Fault:
    """Starts the planned fault once the write stage began; ends it after its window (or at stop)."""

    def __init__(
        self,
        plan: StoreFaultPlan,
        proxy: FaultProxy,
        began: Callable[[], bool],
        revoke: Callable[[], None],
    ) -> None:
        self.plan = plan
        self.proxy = proxy
        self.began = began
        self.revoke = revoke
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="store-fault", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _apply(self) -> None:
        fault = self.plan.fault
        if fault == "reset":
            self.proxy.reset()
        elif fault == "stall":
            self.proxy.stall()
        elif fault in ("http500", "http503"):
            self.proxy.http_error(int(fault[4:]))
        elif fault == "revoke":
            self.revoke()
        else:
            raise ValueError(fault)

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self.began():
                time.sleep(0.05)
            if self._stop.wait(self.plan.delay):
                return
            self._apply()
            self.started_at = time.monotonic()
            if self.plan.window is not None and not self._stop.wait(self.plan.window):
                self.proxy.pass_through()  # a revoked key stays revoked: credentials do not come back
                self.ended_at = time.monotonic()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)
        self.proxy.pass_through()


def run_store_fault_trial(
    plan: StoreFaultPlan,
    *,
    host: SparkHost,
    target: S3Target,
    inputs: list[str],
    work_dir: Path,
    report: CampaignReport,
    echo: Callable[[str], None] = print,
) -> TrialResult:
    result = TrialResult(plan.trial_id, "s3", plan.describe(), kind="store-fault")
    echo(f"trial {plan.describe()}")
    started = time.monotonic()
    name = f"fault-{plan.index}-{uuid.uuid4().hex[:6]}"
    store_uri = f"s3://{target.bucket}/{name}/store"
    output_uri = f"file://{work_dir / name / 'out'}"
    # The operator opens its store with the output roots its DAG declares (an S3 store may then
    # declare a local output root: the DAG vouches for it, docs/security.md "The trust model").
    admin = open_store(store_uri, trusted_output_roots=[output_uri], **target.admin_options)
    output = OutputLocation(output_uri, {})
    identities = SeaweedIdentities(target.server, target.bucket)
    identity: Identity | None = None
    proxy = FaultProxy(target.server.s3_port).start()
    try:
        if plan.fault == "revoke":
            identity = identities.grant(f"job-{uuid.uuid4().hex[:8]}")
            credentials = {"aws_access_key_id": identity.access_key, "aws_secret_access_key": identity.secret_key}
        else:
            credentials = {k: v for k, v in target.admin_options.items() if k.startswith("aws_")}
        job_options = {
            "endpoint_url": proxy.endpoint_url,
            "region_name": target.server.region,
            **credentials,
            **JOB_STORE_TUNING,
        }
        # The operator, before submitting, declaring where the job writes (docs/design.md, section 7).
        epoch = admin.epochs.begin(owner=f"operator-{name}", output_roots=[output_uri]).number
        expected_marker = f"epochs/{epoch:08d}.expected.json"

        def revoke() -> None:
            assert identity is not None
            identities.revoke(identity)

        fault = _Fault(plan, proxy, lambda: admin.blobs.exists(expected_marker), revoke)
        inputs_now = inputs_of_round(inputs, 2)
        spec = {
            "store_uri": store_uri,
            "output": output_uri,
            "inputs": inputs_now,
            "mode": plan.mode,
            "num_partitions": plan.num_partitions,
            "max_records_per_file": None,
            "epoch": epoch,
        }
        fault.start()
        outcome = host.run(spec, job_options, SLOW_TASKS, run_id=f"{name}/job")
        fault.stop()
        faulted = proxy.resets + proxy.error_responses + proxy.stalled_requests
        fault_state = (
            "never started (the job was faster)"
            if fault.started_at is None
            else f"started, {faulted} requests faulted by the proxy"
        )
        echo(f"  job: {'ok' if outcome.ok else 'FAILED'} in {outcome.seconds:.1f}s; fault {fault_state}")
        if fault.error:
            result.violations.append(f"the fault could not be applied: {fault.error}")
        if not outcome.ok:
            result.violations.append(f"the job did not complete under the store fault: {outcome.short_error(800)}")
            admin.epochs.end(epoch, status=EpochStatus.FAILED)
            return result
        job = outcome.result or {}
        degraded = bool(job.get("degraded"))
        result.degraded = degraded
        writes = job.get("writes") or [{}]
        sealed, partitions = writes[0].get("sealed_partitions"), writes[0].get("partitions")
        result.note(f"job result: degraded={degraded} sealed {sealed}/{partitions}; {fault_state}")
        echo(f"  job result: degraded={degraded}, sealed {sealed}/{partitions} partitions")
        if not degraded and sealed != partitions:
            result.violations.append(f"degraded=False but only {sealed} of {partitions} partitions sealed")
        # The operator: end the epoch, then (later, with its own credentials) commit with the job's flag.
        admin.epochs.end(epoch, status=EpochStatus.SUCCEEDED, summary={"degraded": degraded})
        committed = admin.commit([output_uri], degraded=degraded)
        admin.housekeeping.cleanup(plan.policy)
        echo(
            f"  commit: {len(committed.committed_files)} files committed, {len(committed.deleted_files)} deleted, "
            f"{len(committed.unknown_files)} unknown, {len(committed.kept_unprovable)} kept"
        )
        if committed.deleted_files:
            result.violations.append(
                f"every task of the run succeeded, yet the commit deleted {list(committed.deleted_files)[:3]}"
            )
        audit = audit_after_commit(admin, output, inputs_now, mode=plan.mode, policy=plan.policy, store_faults=degraded)
        result.violations += audit.violations
    except Exception as exc:
        result.violations.append(f"trial raised {type(exc).__name__}: {exc}")
    finally:
        proxy.stop()
        if identity is not None:
            with contextlib.suppress(Exception):  # already revoked
                identities.revoke(identity)
        admin.close()
        result.seconds = time.monotonic() - started
        verdict = "OK" if not result.violations else f"{len(result.violations)} VIOLATIONS: {result.violations}"
        echo(f"  -> {verdict} in {result.seconds:.1f}s")
        report.add(result)
    return result
