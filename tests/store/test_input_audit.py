"""The commit refuses to lose input (store/input_audit.py), on both backends.

A row-key run that found pending keys in the input its shortcut skipped records a skip audit;
the commit refuses (``RefusedError``, reason ``input_skipped``) and ``check()`` reports it
while the audit is unresolved. Here the audits are recorded through the store's API as the
Spark side does (tests/spark/test_input_audit.py runs the Spark side).
"""

from __future__ import annotations

from airflow_ckpt_provider.store import CheckpointStore, EpochStatus, SkipAudit
from airflow_ckpt_provider.store.errors import RefusedError
from tests.store.conftest import Backend
from tests.store.helpers import write_task
from tests.support.errors import raises_reason


def _run(backend: Backend, store: CheckpointStore, keys: list[list[str]]) -> int:
    """One successful run sealing one checkpoint per key list; its epoch."""
    epoch = store.epochs.begin(owner="t").number
    for partition, part in enumerate(keys):
        write_task(store, backend, epoch=epoch, partition=partition, keys=part)
    store.epochs.end(epoch, status=EpochStatus.SUCCEEDED)
    return epoch


def _audit(epoch: int, keys: tuple[str, ...], *, fell_back: bool) -> SkipAudit:
    return SkipAudit(
        epoch=epoch, source="src1", columns=("order_id",), pending_skipped=len(keys), keys=keys, fell_back=fell_back
    )


def test_a_commit_refuses_while_skipped_pending_keys_are_not_processed(backend: Backend) -> None:
    store = backend.store()
    _run(backend, store, [["a", "b"], ["c"]])
    store.commit([backend.output_uri])
    # A run found e and f pending in the input its shortcut skipped; it read exactly, yet they stay pending
    # (what the guard is for: the fallback did not do its work).
    second = _run(backend, store, [["d"]])
    store.epochs.record_skip_audit(_audit(second, ("e", "f"), fell_back=True))

    with raises_reason(RefusedError, "input_skipped") as refused:
        store.commit([backend.output_uri])
    assert isinstance(refused.value, RefusedError)
    message = str(refused.value)
    assert f"epoch {second}" in message and '"e"' in message and "run the job again" in message
    assert store.get_checkpointed_files()  # nothing was committed
    report = store.inspection.check()
    assert not report.ok
    assert any("pending input keys skipped" in p and '"f"' in p for p in report.problems), report.problems

    # The next run processes them: resolved, the commit goes through, check is clean.
    _run(backend, store, [["e", "f"]])
    store.commit([backend.output_uri])
    assert store.inspection.check().ok


def test_a_run_that_did_not_read_exactly_refuses_until_its_work_is_discarded(backend: Backend) -> None:
    store = backend.store()
    _run(backend, store, [["a"]])
    store.commit([backend.output_uri])
    # This run sealed e from the rows it read, but skipped the rows of e (and f) in the skipped input.
    second = _run(backend, store, [["e"]])
    store.epochs.record_skip_audit(_audit(second, ("e", "f"), fell_back=False))
    _run(backend, store, [["f"]])  # a later run processing f does not make e's rows whole
    with raises_reason(RefusedError, "input_skipped", match="did not read its input exactly"):
        store.commit([backend.output_uri])

    store.housekeeping.discard_uncommitted()
    _run(backend, store, [["e", "f"]])
    store.commit([backend.output_uri])
    assert store.inspection.check().ok
    assert store.epochs.skip_audit_epochs(since=1) == [second]  # the record stays until retention prunes its epoch
