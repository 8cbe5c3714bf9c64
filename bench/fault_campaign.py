"""The large fault-injection campaign: many seeded trials, one report, zero violations expected.

    .venv/bin/python -m bench.fault_campaign [--seed S] [--trials 30] [--submit-trials 6] \
        [--cluster-trials 6] [--mapped-trials 4] [--store-trials 20] [--reprocess-trials 36] [--races 100] \
        [--double-submits 3] [--backends local,s3] [--only s3#12]

Per backend: ``--trials`` failpoint trials in one resident Spark session (a
crash at a failpoint of the write task or the driver, raise or exit, at some
hit; resume, maybe crashing again; commit, maybe crashing there and retrying) and
``--submit-trials`` trials with spark-submit (SIGKILL of the driver at a random
moment, or an exit failpoint in the driver), then ``--cluster-trials`` trials on a Spark standalone
cluster (master and two single-core workers on distinct loopback addresses, client mode: the user's
code failing, our executor code crashing, an executor JVM SIGKILLed, the driver SIGKILLed), then
``--mapped-trials`` trials of a mapped DAG in a real Airflow installation (two mapped instances of a
checkpointed spark-submit at once, one crashing; ``ckpt_testkit/faults/mapped_trials.py``). With S3:
``--store-trials``
store faults through the TCP proxy (resets, stalls past the timeout, 500/503,
the job's identity deleted on the server). ``--reprocess-trials`` crash reprocess, rewind, undo
and purge at their failpoints (raise, or a killed process), finish them with a re-run, then run
and commit the next job (36 deals every action x failpoint x crash kind once; store-API job, no
Spark). Then ``--races`` begin_epoch races of
two processes per backend and ``--double-submits`` pairs of real spark-submits.

Every trial prints its seed and plan; ``--seed S --only local#7`` replays one.
Prints the report (trials per failpoint and backend, fired counts, store-fault
outcomes, races, violations) and writes it to ``test-output/fault-campaign-large.txt``.
Exit code 1 if any promise was broken. The same code runs a few trials in CI
(``pytest tests/faults``, sized by the ``CKPT_FAULT_*`` variables).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

from ckpt_testkit.faults import mapped_trials
from ckpt_testkit.faults.campaign import Backend, Campaign, TrialResult
from ckpt_testkit.faults.plans import Planner, expected_cells
from ckpt_testkit.faults.processes import SparkHost
from ckpt_testkit.faults.races import race_begin_epoch, race_spark_submits
from ckpt_testkit.faults.reprocess_trials import ReprocessTrial, deal, run_trial
from ckpt_testkit.faults.store_faults import S3Target, run_store_fault_trial
from ckpt_testkit.faults.workload import make_inputs
from ckpt_testkit.seaweed import SeaweedServer
from ckpt_testkit.spark_cluster import standalone_cluster
from tests.support.airflow_harness import AirflowHarness

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=None, help="campaign seed (default: random, printed)")
    parser.add_argument("--trials", type=int, default=30, help="failpoint trials per backend (resident session)")
    parser.add_argument("--submit-trials", type=int, default=6, help="spark-submit trials per backend")
    parser.add_argument(
        "--cluster-trials", type=int, default=0, help="trials per backend on a Spark standalone cluster"
    )
    parser.add_argument(
        "--mapped-trials", type=int, default=0, help="mapped-DAG trials (Airflow, two instances at once)"
    )
    parser.add_argument("--store-trials", type=int, default=20, help="store-fault trials (S3 only)")
    parser.add_argument(
        "--reprocess-trials", type=int, default=36, help="reprocess/rewind/undo/purge crash trials per backend"
    )
    parser.add_argument("--races", type=int, default=100, help="begin_epoch races per backend")
    parser.add_argument("--double-submits", type=int, default=3, help="pairs of spark-submits started together")
    parser.add_argument("--backends", default="local,s3", help="comma-separated: local, s3")
    parser.add_argument(
        "--only",
        default=None,
        help="replay one trial: local#3, s3#5, local-submit#1, local-cluster#2, mapped#1, s3-fault#2, "
        "local-reprocess#4",
    )
    parser.add_argument("--work-dir", default=None, help="keep everything here (default: a temp dir)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 10**6)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="fault-campaign-"))
    work.mkdir(parents=True, exist_ok=True)
    backends = [b for b in args.backends.split(",") if b]
    print(f"fault campaign seed {seed}; work dir {work}", flush=True)
    inputs = make_inputs(work / "inputs")
    server: SeaweedServer | None = None
    host = SparkHost(work / "host")
    try:
        campaign_backends = {"local": Backend("local", f"file://{work / 'local'}")}
        bucket = ""
        if "s3" in backends:
            server = SeaweedServer(work / "seaweed").start()
            bucket = server.create_bucket("fault-campaign")
            server.client().put_object(Bucket=bucket, Key="warm-up", Body=b"")
            campaign_backends["s3"] = Backend("s3", f"s3://{bucket}/trials", server.options())
        host.start()
        campaign = Campaign(seed, work, host, inputs, campaign_backends, echo=lambda line: print(line, flush=True))
        planner = Planner(seed)
        dealt = {"host": args.trials, "submit": args.submit_trials, "cluster": args.cluster_trials}
        campaign.report.expected = expected_cells(dealt, backends)
        if args.mapped_trials >= len(mapped_trials.MAPPED_CRASH_POINTS):
            campaign.report.expected |= {(p, mapped_trials.PATH) for p in mapped_trials.MAPPED_CRASH_POINTS}
        if args.only:
            return replay(args.only, campaign, planner, server, bucket, inputs, work)
        for backend in backends:
            for index in range(args.trials):
                campaign.run_trial(planner.trial(backend, index))
            for index in range(args.submit_trials):
                campaign.run_trial(planner.trial(backend, index, own_driver=True))
        if args.cluster_trials:
            host.stop()  # the cluster's executors need the cores
            with standalone_cluster(work / "cluster") as cluster:
                campaign.cluster = cluster
                for backend in backends:
                    for index in range(args.cluster_trials):
                        campaign.run_trial(planner.cluster_trial(backend, index))
            campaign.cluster = None
            host.start()
        if args.mapped_trials:
            host.stop()  # each instance is its own spark-submit
            harness = _airflow(work)
            for index in range(args.mapped_trials):
                _mapped_trial(mapped_trials.deal(seed, index), harness, campaign, work)
            host.start()
        if server is not None:
            for index in range(args.store_trials):
                run_store_fault_trial(
                    planner.store_fault(index),
                    host=host,
                    target=S3Target(server, bucket),
                    inputs=inputs,
                    work_dir=work / "store-faults",
                    report=campaign.report,
                )
        host.stop()  # the races need the cores
        for backend in backends:
            for trial in deal(str(seed), args.reprocess_trials):
                campaign.report.add(_reprocess_trial(trial, backend, server, bucket, inputs, work))
        for backend in backends:
            if args.races:
                if backend == "s3" and server is not None:
                    uri, options = f"s3://{bucket}/races/{time.time_ns()}", server.options()
                else:
                    uri, options = f"file://{work / 'races' / str(time.time_ns())}", {}
                race = race_begin_epoch(f"begin_epoch/{backend}", uri, options, args.races)
                print(race["summary"], flush=True)
                campaign.report.add_race(race)
        for pair in range(args.double_submits):
            race = race_spark_submits(
                f"spark-submit pair {pair}",
                store_uri=f"file://{work / 'double' / str(pair) / 'store'}",
                output_uri=f"file://{work / 'double' / str(pair) / 'out'}",
                options={},
                inputs=inputs,
                log_dir=work / "double" / "logs",
                mode=("rows", "files")[pair % 2],
            )
            print(race["summary"], flush=True)
            campaign.report.add_race(race)
        text = campaign.report.format()
        print("\n" + text)
        out = ROOT / "test-output" / "fault-campaign-large.txt"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n")
        return 1 if campaign.report.violations else 0
    finally:
        host.stop()
        if server is not None:
            server.close()


def _reprocess_trial(
    trial: ReprocessTrial, backend: str, server: SeaweedServer | None, bucket: str, inputs: list[str], work: Path
) -> TrialResult:
    where = work / "reprocess" / backend / f"t{trial.index}-{time.time_ns()}"
    (where / "out").mkdir(parents=True)
    if backend == "s3" and server is not None:
        store_uri, options = f"s3://{bucket}/reprocess/{where.name}", server.options()
    else:
        store_uri, options = f"file://{where / 'store'}", {}
    result = run_trial(
        trial,
        backend=backend,
        store_uri=store_uri,
        options=options,
        output_uri=f"file://{where / 'out'}",
        inputs=inputs,
    )
    print(f"{result.trial_id}: {trial.describe()} -> {result.violations or 'ok'}", flush=True)
    return result


def _airflow(work: Path) -> AirflowHarness:
    """A fresh Airflow installation (SQLite metadata DB) holding the tenants DAG."""
    harness = AirflowHarness.create(work / "airflow")
    mapped_trials.install(harness, ROOT / "tests" / "support" / "dags")
    return harness


def _mapped_trial(trial: mapped_trials.MappedTrial, harness: AirflowHarness, campaign: Campaign, work: Path) -> None:
    print(f"trial {trial.describe()}", flush=True)
    result = mapped_trials.run_trial(trial, harness, work / "mapped")
    print(f"  -> {result.violations or 'OK'} in {result.seconds:.1f}s", flush=True)
    campaign.report.add(result)


def replay(
    only: str,
    campaign: Campaign,
    planner: Planner,
    server: SeaweedServer | None,
    bucket: str,
    inputs: list[str],
    work: Path,
) -> int:
    name, _, number = only.partition("#")
    index = int(number)
    if name == "s3-fault":
        if server is None:
            raise SystemExit("s3-fault trials need --backends with s3")
        result = run_store_fault_trial(
            planner.store_fault(index),
            host=campaign.host,
            target=S3Target(server, bucket),
            inputs=inputs,
            work_dir=work / "store-faults",
            report=campaign.report,
        )
    elif name.endswith("-reprocess"):
        backend = name.split("-")[0]
        trials = deal(str(campaign.seed), index + 1)
        result = _reprocess_trial(trials[index], backend, server, bucket, inputs, work)
        campaign.report.add(result)
    elif name == "mapped":
        _mapped_trial(mapped_trials.deal(campaign.seed, index), _airflow(work), campaign, work)
        result = campaign.report.trials[-1]
    elif name.endswith("-cluster"):
        with standalone_cluster(work / "cluster") as cluster:
            campaign.cluster = cluster
            result = campaign.run_trial(planner.cluster_trial(name.split("-")[0], index))
    else:
        backend, _, kind = name.partition("-")
        result = campaign.run_trial(planner.trial(backend, index, own_driver=kind == "submit"))
    print("\n".join(result.log))
    print(campaign.report.format())
    return 1 if result.violations else 0


if __name__ == "__main__":
    sys.exit(main())
