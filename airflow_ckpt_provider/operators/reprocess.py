"""``ReprocessCheckpointsOperator`` and ``RewindCheckpointsOperator``: redo part of a store from a DAG.

Both make checkpoints pending again and take their output (committed or not) out of the output
directory — to the store's quarantine by default — so the next run of the job writes it once
more (docs/reprocess.md). The task logs the preview (counts and the exact files) before acting;
``preview_only=True`` stops there. An Airflow retry after a crash finishes the interrupted action.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from airflow_ckpt_provider.hooks.output_anchor import OutputAnchor
from airflow_ckpt_provider.hooks.store_location import store_template_fields
from airflow_ckpt_provider.operators import metrics
from airflow_ckpt_provider.operators.base import CheckpointStoreBaseOperator, as_bool
from airflow_ckpt_provider.store import CheckpointStore, ReprocessPlan, ReprocessResult, Selection
from airflow_ckpt_provider.store.errors import InvalidArgumentError, RefusedError

if TYPE_CHECKING:
    from airflow.sdk import Context

#: Files the task log lists in the preview before "… and N more".
LOGGED_FILES = 200


def _as_list(value: Any, what: str) -> list[Any]:
    """A list from a Python list, or a rendered template (JSON, or comma-separated text)."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                parsed = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidArgumentError(
                    f"{what}: {text!r} is not a JSON list ({exc.msg})", reason="selection"
                ) from exc
            return list(parsed)
        return [part.strip() for part in text.split(",") if part.strip()]
    if isinstance(value, (list, tuple, set)):
        return list(value)
    return [value]


class _StoreActionOperator(CheckpointStoreBaseOperator):
    """What reprocess and rewind share: the store, the mode, the preview in the log, metrics."""

    ui_color = "#f0c987"

    def __init__(
        self,
        *,
        output_roots: Sequence[str] | str | None = None,
        delete: bool | str = False,
        preview_only: bool | str = False,
        max_files: int | str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.output_roots = output_roots
        self.delete = delete
        self._anchor: OutputAnchor | None = None
        self.preview_only = preview_only
        self.max_files = max_files

    def _store(self, context: Context) -> tuple[str, CheckpointStore]:
        # A mapped submit: a task mapped the same way works on the store of its own map index; an
        # unmapped one is refused (InvalidArgumentError("ambiguous_store")) rather than retracting from every tenant.
        hook = self.store_hook(self.store_uri(context), context)
        self._anchor = hook.output_anchor
        store = hook.get_store()
        return store.uri, store  # canonical (file://...), as the job's own XCom names it

    def _requested_by(self, context: Context) -> str:
        ti = context["ti"]
        return f"airflow:{ti.dag_id}/{ti.task_id}/{context['run_id']}"

    def _preview(self, store: CheckpointStore, delete: bool) -> ReprocessPlan:
        raise NotImplementedError  # pragma: no cover - each action previews itself

    def _run(self, store: CheckpointStore, plan: ReprocessPlan, delete: bool, requested_by: str) -> ReprocessResult:
        raise NotImplementedError  # pragma: no cover - each action runs the plan its preview made

    def execute(self, context: Context) -> dict[str, Any]:
        uri, store = self._store(context)
        delete = as_bool(self.delete)
        plan = self._preview(store, delete)
        return self._act(context, plan, uri, lambda: self._run(store, plan, delete, self._requested_by(context)))

    def _act(
        self, context: Context, plan: ReprocessPlan, uri: str, run: Callable[[], ReprocessResult]
    ) -> dict[str, Any]:
        self.log.info("%s", plan.describe(max_files=LOGGED_FILES))
        limit = None if self.max_files is None or self.max_files == "" else int(self.max_files)
        if limit is not None and len(plan.files) > limit:
            raise RefusedError(
                f"the {plan.action} would take {len(plan.files)} file(s) out of the output, more than max_files="
                f"{self.max_files}: nothing was changed. Narrow the selection, or raise max_files",
                reason="too_large",
            )
        base: dict[str, Any] = {
            "checkpoint_uri": uri,
            "aws_conn_id": self.aws_conn_id,
            "preview_only": as_bool(self.preview_only),
        }
        anchor = self._anchor
        if anchor is not None and anchor.keeps_output and plan.refused_paths:
            base |= {
                "output_kept_because": anchor.warning("output_roots"),
                "output_files_kept": list(plan.refused_paths),
            }
            if not as_bool(self.preview_only):
                # Taking the checkpoints back without their output would leave it twice after the next run.
                raise RefusedError(
                    f"{self.task_id}: the {plan.action} would retract {len(plan.refused_paths)} output file(s), but "
                    f"{anchor.warning('output_roots=[...] on this task or on its spark_task_id')}. Nothing was changed",
                    reason="unsafe_path",
                )
        if as_bool(self.preview_only):
            self.log.info("preview_only=True: nothing was changed")
            return base | {"preview": plan.to_json(max_files=0), "result": None}
        result = run()
        summary = result.summary()
        self.log.info(
            "%s of %s%s: %d checkpoint(s), %d key(s) pending; %d file(s) moved to quarantine, %d deleted, "
            "%d already missing (epoch %s)",
            result.action,
            uri,
            " (resumed)" if result.resumed else "",
            summary["checkpoints"],
            summary["keys"],
            summary["moved"],
            summary["deleted"],
            summary["missing"],
            summary["epoch"],
        )
        tags = metrics.task_tags(context)
        metrics.count(metrics.REPROCESSES, 1 if result.epoch is not None else 0, tags)
        metrics.count(metrics.FILES_RETRACTED, summary["moved"] + summary["deleted"], tags)
        return base | {"preview": None, "result": summary}


class ReprocessCheckpointsOperator(_StoreActionOperator):
    """Reprocess the checkpoints holding some keys, input files, epochs, commits or seal times.

    Those checkpoints become pending (the next run of the job processes their keys again) and
    their output files leave the output directory: moved to the store's quarantine
    (``quarantine/{epoch}/`` under the store root; ``airflow-ckpt undo`` restores them before
    the next run, ``airflow-ckpt purge`` deletes them), or deleted with ``delete=True``. Every
    criterion given must hold. Refused, with nothing changed, while a submit holds the store.

    :param checkpoint_uri: the store (templated). Default: the store ``spark_task_id`` used in this run.
    :param spark_task_id: the ``CheckpointedSparkSubmitOperator`` whose store to work on (templated). If it is
        mapped, map this task the same way (each instance works on the store of its map index).
    :param aws_conn_id: ``aws`` connection for ``s3://`` stores (templated).
    :param output_roots: where output may be retracted (templated), with those of ``spark_task_id``.
        Where neither declares any (and ``[ckpt] trusted_output_roots`` is not set), the action is
        refused before anything changes: retracting checkpoints without their output would leave
        it twice after the next run (the preview lists the files, ``output_files_kept``).
    :param keys: row keys (templated: a list, a JSON list, or comma-separated text).
    :param files: input files, for jobs with file keys (templated, as ``keys``).
    :param epochs: epoch numbers (templated). :param commits: commit numbers (templated).
    :param sealed_after: / :param sealed_before: ISO 8601 times with a time zone (templated).
    :param delete: delete the files instead of the quarantine (no undo).
    :param preview_only: only log the preview (a dry run; ``dry_run`` is taken by BaseOperator).
    :param max_files: refuse (nothing changed) when more files would be retracted.

    Returns the counts (XCom): checkpoints, keys, files, bytes, moved, deleted, missing, epoch.
    """

    template_fields: Sequence[str] = store_template_fields(
        "output_roots",
        "keys",
        "files",
        "epochs",
        "commits",
        "sealed_after",
        "sealed_before",
        "delete",
        "preview_only",
        "max_files",
    )

    def __init__(
        self,
        *,
        keys: Sequence[Any] | str | None = None,
        files: Sequence[str] | str | None = None,
        epochs: Sequence[int] | str | None = None,
        commits: Sequence[int] | str | None = None,
        sealed_after: str | None = None,
        sealed_before: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.keys = keys
        self.files = files
        self.epochs = epochs
        self.commits = commits
        self.sealed_after = sealed_after
        self.sealed_before = sealed_before

    def selection(self) -> Selection:
        try:
            return Selection(
                keys=_as_list(self.keys, "keys"),
                files=[str(f) for f in _as_list(self.files, "files")],
                epochs=[int(e) for e in _as_list(self.epochs, "epochs")],
                commits=[int(c) for c in _as_list(self.commits, "commits")],
                sealed_after=self.sealed_after or None,
                sealed_before=self.sealed_before or None,
            )
        except (ValueError, InvalidArgumentError) as exc:
            raise InvalidArgumentError(f"{self.task_id}: {exc}", reason="selection") from exc

    def _preview(self, store: CheckpointStore, delete: bool) -> ReprocessPlan:
        return store.reprocessing.preview(self.selection(), delete=delete)

    def _run(self, store: CheckpointStore, plan: ReprocessPlan, delete: bool, requested_by: str) -> ReprocessResult:
        selection = self.selection()
        return store.reprocessing.run(selection, delete=delete, expected=plan, requested_by=requested_by)


class RewindCheckpointsOperator(_StoreActionOperator):
    """Return an incremental (``retain``) store to its state after commit ``to_commit``.

    Every checkpoint sealed after that commit becomes pending and its output leaves the output
    directory (quarantine by default), so the next run processes those inputs again — e.g. after
    fixing a bug that affected the last runs. Otherwise as :class:`ReprocessCheckpointsOperator`.

    :param to_commit: the commit (epoch number) to return to; 0 for before the first (templated).
    """

    template_fields: Sequence[str] = store_template_fields(
        "output_roots", "to_commit", "delete", "preview_only", "max_files"
    )

    def __init__(self, *, to_commit: int | str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.to_commit = to_commit

    def _to_commit(self) -> int:
        try:
            return int(self.to_commit)
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"{self.task_id}: to_commit={self.to_commit!r} is not a commit number", reason="selection"
            ) from None

    def _preview(self, store: CheckpointStore, delete: bool) -> ReprocessPlan:
        return store.reprocessing.preview_rewind(self._to_commit(), delete=delete)

    def _run(self, store: CheckpointStore, plan: ReprocessPlan, delete: bool, requested_by: str) -> ReprocessResult:
        return store.reprocessing.rewind(self._to_commit(), delete=delete, expected=plan, requested_by=requested_by)
