"""Two submits on one store at the same moment: one proceeds, the other fails fast with a clear error.

Two ways:

* :func:`race_begin_epoch` — two processes, released together by a barrier, both
  call ``begin_epoch`` (what every submit does first), many times over. Each time
  exactly one must win; the other must get :class:`EpochConflictError` quickly;
  the winner then seals a checkpoint and ends its epoch, so the store grows.
* :func:`race_spark_submits` — two real spark-submits of the example job started
  together, each opening its own epoch under its own owner.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from airflow_ckpt_provider.store import EpochStatus, RetentionPolicy, new_checkpoint_id, open_store
from airflow_ckpt_provider.store.errors import EpochConflictError
from ckpt_testkit.faults.oracle import audit_after_commit, check_store
from ckpt_testkit.faults.processes import RunOutcome, run_submit
from ckpt_testkit.faults.workload import OutputLocation

#: A loser must know within this long that it lost.
FAIL_FAST_SECONDS = 5.0
#: A clear conflict message names the epoch and says what to do next (one of these).
NEXT_STEPS = ("Retry", "Wait for it")
ONE_WINNER = Counter({"won": 1, "lost": 1})


def _racer(
    side: str,
    store_uri: str,
    options: Mapping[str, Any],
    reps: int,
    barrier: Any,
    results: Any,
) -> None:
    store = open_store(store_uri, **options)
    for rep in range(reps):
        barrier.wait()
        started = time.perf_counter()
        number: int | None = None
        try:
            number = store.epochs.begin(owner=f"submit-{side}").number
            outcome, message = "won", ""
        except EpochConflictError as exc:
            outcome, message = "lost", str(exc)
        except Exception as exc:
            outcome, message = "error", f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - started
        barrier.wait()  # both decided before the winner's run ends its epoch
        if number is not None:
            checkpoint_id = new_checkpoint_id()
            store.stage_keys(checkpoint_id, [rep])
            store.checkpoint(checkpoint_id, epoch=number, partition=0)
            store.epochs.end(number, status=EpochStatus.SUCCEEDED)
        results.put((rep, side, outcome, message, seconds))
        barrier.wait()  # the winner finished before the next race


def race_begin_epoch(name: str, store_uri: str, options: Mapping[str, Any], reps: int) -> dict[str, Any]:
    """``reps`` races of two processes calling ``begin_epoch`` together; returns counts and violations."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2, timeout=120)
    results = context.Queue()
    processes = [
        context.Process(target=_racer, args=(side, store_uri, dict(options), reps, barrier, results), daemon=True)
        for side in ("a", "b")
    ]
    started = time.monotonic()
    for process in processes:
        process.start()
    rows = [results.get(timeout=300) for _ in range(2 * reps)]
    for process in processes:
        process.join(timeout=60)
    wall = time.monotonic() - started
    violations: list[str] = []
    by_rep: dict[int, list[tuple[str, str, str, float]]] = {}
    for rep, side, outcome, message, seconds in rows:
        by_rep.setdefault(rep, []).append((side, outcome, message, seconds))
    loser_seconds: list[float] = []
    for rep in range(reps):
        outcomes = Counter(o for _, o, _, _ in by_rep.get(rep, []))
        if outcomes != ONE_WINNER:
            detail = [(s, o, m[:200]) for s, o, m, _ in by_rep.get(rep, [])]
            violations.append(f"race {rep}: expected one winner and one EpochConflictError, got {detail}")
            continue
        for _, outcome, message, seconds in by_rep[rep]:
            if outcome != "lost":
                continue
            loser_seconds.append(seconds)
            if seconds > FAIL_FAST_SECONDS:
                violations.append(f"race {rep}: the loser took {seconds:.1f}s to fail")
            if "epoch" not in message or not any(step in message for step in NEXT_STEPS):
                violations.append(f"race {rep}: unclear conflict message: {message!r}")
    store = open_store(store_uri, **options)
    epochs = store.epochs.all()
    if len(epochs) != reps:
        violations.append(f"{len(epochs)} epochs after {reps} races: exactly one per race must exist")
    keys = store.get_checkpointed_keys().column(0).to_pylist()
    if sorted(keys) != list(range(reps)):
        violations.append(f"done keys {len(keys)} (distinct {len(set(keys))}) != one per race ({reps})")
    violations += check_store(store)
    winners = Counter(side for rows_of_rep in by_rep.values() for side, o, _, _ in rows_of_rep if o == "won")
    p50 = statistics.median(loser_seconds) * 1000 if loser_seconds else float("nan")
    top = max(loser_seconds) * 1000 if loser_seconds else float("nan")
    decided = sum(1 for r in range(reps) if Counter(o for _, o, _, _ in by_rep.get(r, [])) == ONE_WINNER)
    summary = (
        f"{reps} races of begin_epoch between 2 processes: {decided} with one winner "
        f"(a won {winners['a']}, b won {winners['b']}), the loser failed in p50 {p50:.0f} ms / max {top:.0f} ms; "
        f"{len(violations)} violations; {wall:.0f}s"
    )
    return {"name": name, "summary": summary, "violations": violations, "wall": wall}


def race_spark_submits(
    name: str,
    *,
    store_uri: str,
    output_uri: str,
    options: Mapping[str, Any],
    inputs: Sequence[str],
    log_dir: Path,
    mode: str = "rows",
) -> dict[str, Any]:
    """Two real spark-submits of the job on one store, started together (each opens its own epoch).

    The winner holds its fresh epoch for a few seconds (failpoint ``store.begin_epoch.after_create=
    sleep:8``) so that JVM start-up jitter cannot turn the race into two runs one after the other.
    """
    outcomes: dict[str, RunOutcome] = {}

    def submit(side: str) -> None:
        spec = {
            "store_uri": store_uri,
            "output": output_uri,
            "inputs": list(inputs),
            "mode": mode,
            "num_partitions": 4,
            "max_records_per_file": None,
            "owner": f"submit-{side}",
        }
        outcomes[side] = run_submit(
            spec, options, "store.begin_epoch.after_create=sleep:8", log_prefix=log_dir / f"{name}-{side}"
        )

    threads = [threading.Thread(target=submit, args=(side,)) for side in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    violations: list[str] = []
    winners = [s for s, o in outcomes.items() if o.ok]
    losers = [s for s, o in outcomes.items() if not o.ok]
    if len(winners) != 1:
        violations.append(
            f"expected exactly one submit to proceed, got {len(winners)} "
            f"({ {s: o.short_error(300) for s, o in outcomes.items()} })"
        )
    for side in losers:
        if "EpochConflictError" not in outcomes[side].error:
            violations.append(
                f"submit {side} failed without a clear EpochConflictError: {outcomes[side].short_error()}"
            )
    store = open_store(store_uri, **options)
    if winners:
        store.commit([output_uri])
        store.housekeeping.cleanup(RetentionPolicy.DELETE_AFTER_SUCCESS)
        violations += audit_after_commit(
            store,
            OutputLocation(output_uri, options),
            inputs,
            mode=mode,
            policy=RetentionPolicy.DELETE_AFTER_SUCCESS,
            store_faults=False,
        ).violations
    else:
        violations += check_store(store)
    times = ", ".join(
        f"{s}: {'proceeded' if o.ok else 'failed'} after {o.seconds:.1f}s" for s, o in sorted(outcomes.items())
    )
    summary = f"two spark-submits on one store: {times}; {len(violations)} violations"
    return {"name": name, "summary": summary, "violations": violations}
