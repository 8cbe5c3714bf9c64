"""Test helpers for the Spark side: input data, reference output, exactly-once checks, spark-submit.

The tests play the Airflow operator's part themselves (open an epoch, pass the
``spark.ckpt.*`` confs and ``CKPT_STORE_SECRETS``, end the epoch, commit), so the
Spark side is tested against the real contract without Airflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from airflow_ckpt_provider.contract import Handoff
from airflow_ckpt_provider.spark import parse_result_line
from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path
from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, open_store
from ckpt_testkit.spark_cluster import SPARK_HOME, spark_env

JOB_SCRIPT = Path(__file__).parent / "jobs" / "resumable_job.py"
REPO_ROOT = Path(__file__).resolve().parents[2]
OPERATOR = "test-operator"

Row = tuple[int, str, float]


@dataclass
class Target:
    """Where a test's store and output live: local disk or the S3 server."""

    name: str
    store_uri: str
    output_uri: str
    options: dict[str, Any] = field(default_factory=dict)

    def store(self) -> CheckpointStore:
        return open_store(self.store_uri, **self.options)

    def output_files(self) -> list[str]:
        filesystem = arrow_filesystem(self.output_uri, self.options)
        selector = pa.fs.FileSelector(arrow_path(self.output_uri), recursive=True, allow_not_found=True)
        return sorted(i.path for i in filesystem.get_file_info(selector) if i.type == pa.fs.FileType.File)

    def read_output(self) -> list[Row]:
        """Every output row as (event_id, account, amount2), sorted; duplicates kept."""
        files = self.output_files()
        if not files:
            return []
        filesystem = arrow_filesystem(self.output_uri, self.options)
        dataset = ds.dataset(files, filesystem=filesystem, format="parquet")
        table = dataset.to_table(columns=["event_id", "account", "amount2"])
        return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True))


def make_inputs(
    directory: Path, *, files: int = 8, rows_per_file: int = 120, accounts: int = 24, skew: float | None = None
) -> list[str]:
    """Parquet input files; each account's rows are spread over every file (row keys need a shuffle).

    ``skew``: that share of rows belongs to one account (one large partition, the rest small or empty).
    """
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    event = 0
    for f in range(files):
        ids, names, amounts = [], [], []
        for r in range(rows_per_file):
            account = 0 if skew is not None and (r % 100) < skew * 100 else (event % accounts)
            ids.append(event)
            names.append(f" acct-{account:03d}")
            amounts.append(float(event % 997) / 7.0)
            event += 1
        path = directory / f"in-{f:04d}.parquet"
        pq.write_table(pa.table({"event_id": ids, "account": names, "amount": amounts}), path)
        paths.append(str(path))
    return paths


def reference(inputs: Sequence[str]) -> list[Row]:
    """The output a run without failures produces (computed without Spark)."""
    rows: list[Row] = []
    for path in inputs:
        table = pq.read_table(path)
        for event_id, account, amount in zip(*(table.column(c).to_pylist() for c in table.column_names), strict=True):
            rows.append((event_id, account.strip().upper(), amount * 2.0))
    return sorted(rows)


def assert_exactly_once(target: Target, inputs: Sequence[str]) -> None:
    got = target.read_output()
    expected = reference(inputs)
    counts = Counter(r[0] for r in got)
    duplicated = [e for e, c in counts.items() if c > 1]
    missing = sorted({r[0] for r in expected} - set(counts))
    assert not duplicated, f"{len(duplicated)} input rows are in the output more than once, e.g. {duplicated[:5]}"
    assert not missing, f"{len(missing)} input rows are missing from the output, e.g. {missing[:5]}"
    assert got == expected


def input_accounts(inputs: Sequence[str]) -> set[str]:
    return {a for path in inputs for a in pq.read_table(path, columns=["account"]).column(0).to_pylist()}


def done_keys(store: CheckpointStore) -> set[Any]:
    """The store's done keys (struct keys as tuples of their fields)."""
    keys = store.get_checkpointed_keys().column(0).to_pylist()
    return {tuple(k.values()) if isinstance(k, dict) else k for k in keys}


def wait_for(condition: Callable[[], bool], timeout: float, what: str, interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout}s waiting for {what}")


@dataclass
class Submitted:
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] | None

    def tail(self) -> str:
        return (self.stdout[-3000:] + "\n---\n" + self.stderr[-6000:]).strip()


class FakeOperator:
    """What CheckpointedSparkSubmitOperator does around a submit: epoch, confs, secrets, end of epoch."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.store = target.store()

    def begin(self) -> int:
        return self.store.epochs.begin(owner=OPERATOR).number

    def confs(self, epoch: int) -> dict[str, str]:
        """The confs the submit operator passes, but no result file: the tests read the driver's result line."""
        public = {k: v for k, v in self.target.options.items() if not k.startswith("aws_")}
        handoff = Handoff(self.target.store_uri, epoch, public, {}, result_path="", result_line=True)
        return {name: value for name, value in handoff.spark_conf().items() if value}

    def env(self, faults: Sequence[Mapping[str, Any]] = (), failpoints: str = "") -> dict[str, str]:
        secrets = {k: v for k, v in self.target.options.items() if k.startswith("aws_")}
        env = {"CKPT_STORE_SECRETS": json.dumps(secrets), "PYTHONPATH": str(REPO_ROOT)}
        if faults:
            env["CKPT_TEST_FAULTS"] = json.dumps(list(faults))
        if failpoints:
            env["CKPT_FAILPOINTS"] = failpoints
        return env

    def end(self, epoch: int, returncode: int) -> None:
        status = EpochStatus.SUCCEEDED if returncode == 0 else EpochStatus.FAILED
        self.store.epochs.end(epoch, status=status)


def job_spec(
    mode: str,
    inputs: Sequence[str],
    output: str,
    num_partitions: int = 4,
    *,
    python_transform: bool = True,
    engine: str | None = None,
) -> str:
    return json.dumps(
        {
            "mode": mode,
            "inputs": list(inputs),
            "output": output,
            "num_partitions": num_partitions,
            "python_transform": python_transform,
            "engine": engine,
        }
    )


def local_submit_argv(master: str, confs: Mapping[str, str], spec: str) -> list[str]:
    argv = [
        os.path.join(SPARK_HOME, "bin", "spark-submit"),
        "--master",
        master,
        "--driver-memory",
        "768m",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=4",
        "--conf",
        f"spark.sql.files.openCostInBytes={128 * 1024 * 1024}",
        "--conf",
        "spark.driver.host=127.0.0.1",
        "--conf",
        "spark.driver.bindAddress=127.0.0.1",
    ]
    for name, value in confs.items():
        argv += ["--conf", f"{name}={value}"]
    return [*argv, str(JOB_SCRIPT), spec]


def start(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[str]:
    """Start spark-submit in its own process group (so a test can kill the driver and all it spawned)."""
    return subprocess.Popen(
        list(argv),
        env=spark_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=str(REPO_ROOT),
    )


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> Submitted:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        raise AssertionError(f"spark-submit timed out after {timeout}s:\n{out[-2000:]}\n{err[-4000:]}") from None
    return Submitted(proc.returncode, out, err, parse_result_line(out))


def run(argv: Sequence[str], env: Mapping[str, str], timeout: float = 240) -> Submitted:
    return finish(start(argv, env), timeout)


def kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the driver process, then whatever it spawned (its process group), like a lost machine."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def python_executable() -> str:
    return sys.executable
