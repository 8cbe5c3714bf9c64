"""Which tasks of a Spark job finished, as Spark itself recorded it (its event log), for progress oracles.

A progress oracle must not ask the code under test what it finished: it reads
Spark's own event log (``spark.eventLog.enabled=true``, ``spark.eventLog.dir``).
The write job is found by its description (``checkpointed write to <output>``, set
by both writers); its result tasks are the ones that write and seal.

*Finished* means what the job saw: a task whose success Spark logged before the
job's end. A task that completes after Spark aborted its job (it was running when
another task failed) is discarded by Spark itself — its result never reaches the
job — so a writer that seals on the driver cannot count it (its files are orphans
the commit deletes, and the rerun redoes it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class FinishedTask:
    """A task of the write stage that Spark recorded as successful."""

    partition: int
    attempt: int
    task_attempt_id: int


def event_log_confs(directory: Path) -> dict[str, str]:
    """The confs that make Spark write its event log (uncompressed, one file per application) to ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    return {
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": directory.resolve().as_uri(),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
    }


def _events(directory: Path) -> Iterator[dict[str, Any]]:
    """The events of the newest application's log in ``directory`` (the one running or last run).

    Only one application's: Job and Stage IDs restart at 0 in every application, so a directory
    holding the logs of a restarted Spark host would otherwise mix another run's tasks into "the
    last write job" (a restarted fault-campaign host did: a spurious progress violation)."""
    newest = max((p for p in directory.iterdir() if p.is_file()), key=lambda p: p.stat().st_mtime, default=None)
    if newest is not None:
        with newest.open(encoding="utf-8", errors="replace") as lines:
            for line in lines:
                line = line.strip()
                if not line:
                    continue
                try:
                    yield json.loads(line)
                except ValueError:
                    continue  # the last line of a log still being written


def finished_write_tasks(
    directory: Path, output: str, *, timeout: float = 60.0, grace: float = 3.0
) -> list[FinishedTask]:
    """The successful tasks of the last write job to ``output`` (waits until Spark logged the job's end).

    Raises ``TimeoutError`` if no write job to ``output`` started within ``grace`` seconds
    (the run failed before writing), or none ended within ``timeout``.
    """
    marker = f"checkpointed write to {output.rstrip('/')}"
    started = time.monotonic()
    while True:
        found, any_started = _last_write_job(directory, marker)
        if found is not None:
            return found
        waited = time.monotonic() - started
        if waited > timeout or (not any_started and waited > grace):
            raise TimeoutError(f"no ended Spark job '{marker}' in the event log under {directory}")
        time.sleep(0.5)


def _last_write_job(directory: Path, marker: str) -> tuple[list[FinishedTask] | None, bool]:
    jobs: dict[int, set[int]] = {}
    ended: set[int] = set()
    #: Successful result tasks per stage, and the job whose end had already been logged when each ended.
    tasks: dict[int, list[tuple[FinishedTask, set[int]]]] = {}
    for event in _events(directory):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            properties = event.get("Properties") or {}
            description = str(properties.get("spark.job.description") or "")
            # Over Spark Connect the write is labelled by a job tag (the server adds its own prefix).
            tags = str(properties.get("spark.job.tags") or "")
            if description.startswith(marker) or marker in tags:
                jobs[int(event["Job ID"])] = {int(s) for s in event.get("Stage IDs", [])}
        elif kind == "SparkListenerJobEnd":
            ended.add(int(event["Job ID"]))
        elif kind == "SparkListenerTaskEnd":
            if (event.get("Task End Reason") or {}).get("Reason") != "Success":
                continue
            if event.get("Task Type") != "ResultTask":
                continue  # a shuffle's map side: those tasks write nothing
            info = event.get("Task Info") or {}
            task = FinishedTask(int(info["Index"]), int(info.get("Attempt", 0)), int(info["Task ID"]))
            tasks.setdefault(int(event["Stage ID"]), []).append((task, set(ended)))
    candidates = [job for job in jobs if job in ended]
    if not candidates:
        return None, bool(jobs)
    job = max(candidates)
    finished = [task for stage in jobs[job] for task, ended_before in tasks.get(stage, []) if job not in ended_before]
    return sorted(finished, key=lambda t: t.partition), True


def write_task_intervals(directory: Path, output: str) -> list[tuple[int, int]]:
    """(start, end) times in ms of the executor's run of every successful result task of the last ended
    write job to ``output``."""
    marker = f"checkpointed write to {output.rstrip('/')}"
    jobs: dict[int, set[int]] = {}
    ended: set[int] = set()
    intervals: dict[int, list[tuple[int, int]]] = {}
    for event in _events(directory):
        kind = event.get("Event")
        if kind == "SparkListenerJobStart":
            properties = event.get("Properties") or {}
            description = str(properties.get("spark.job.description") or "")
            # Over Spark Connect the write is labelled by a job tag (the server adds its own prefix).
            tags = str(properties.get("spark.job.tags") or "")
            if description.startswith(marker) or marker in tags:
                jobs[int(event["Job ID"])] = {int(s) for s in event.get("Stage IDs", [])}
        elif kind == "SparkListenerJobEnd":
            ended.add(int(event["Job ID"]))
        elif (
            kind == "SparkListenerTaskEnd"
            and event.get("Task Type") == "ResultTask"
            and (event.get("Task End Reason") or {}).get("Reason") == "Success"
        ):
            # The executor's own run of the task: the driver's Launch/Finish times overlap the next
            # task on a freed core (the result is fetched asynchronously), which overstates concurrency.
            info, metrics = event.get("Task Info") or {}, event.get("Task Metrics") or {}
            started = int(info["Launch Time"]) + int(metrics.get("Executor Deserialize Time", 0))
            intervals.setdefault(int(event["Stage ID"]), []).append(
                (started, started + int(metrics.get("Executor Run Time", 0)))
            )
    done = [job for job in jobs if job in ended]
    if not done:
        return []
    return sorted(i for stage in jobs[max(done)] for i in intervals.get(stage, []))


def peak_concurrency(intervals: list[tuple[int, int]]) -> int:
    """The most tasks running at one moment."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak
