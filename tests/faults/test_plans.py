"""The campaign's dealing: one pass through each deck arms every crash point on every path it applies to, and
arms it where it can fire (no Spark here: the planner is pure Python; the trials themselves run elsewhere)."""

from __future__ import annotations

import pytest

from airflow_ckpt_provider.store import RetentionPolicy
from ckpt_testkit.faults.plans import (
    COMMIT_FAILPOINTS,
    EXECUTOR_FAILPOINTS,
    MODES,
    NATIVE_FAILPOINTS,
    ORPHAN_COMMIT_POINTS,
    ORPHAN_POINTS,
    SEAL_WITH_FILES,
    SIGKILL,
    SNAPSHOT_POINTS,
    Planner,
    TrialPlan,
    deck_cells,
    expected_cells,
    path_of,
)

pytestmark = pytest.mark.faults

BACKENDS = ["local", "s3"]


def _one_pass(planner: Planner, kind: str, backend: str) -> list[TrialPlan]:
    must, extra = deck_cells(kind, backend)
    count = len(must) + len(extra)
    if kind == "cluster":
        return [planner.cluster_trial(backend, i) for i in range(count)]
    return [planner.trial(backend, i, own_driver=kind == "submit") for i in range(count)]


@pytest.mark.parametrize("seed", [1, 20261127])
def test_one_pass_through_the_decks_arms_every_crash_point_on_every_path(seed: int) -> None:
    planner = Planner(seed)
    plans = [p for b in BACKENDS for kind in ("host", "submit", "cluster") for p in _one_pass(planner, kind, b)]
    armed = {(p.crash.point, p.path) for p in plans} | {(p.commit_crashes[0].point, p.path) for p in plans}
    expected = expected_cells({"host": 200, "submit": 200, "cluster": 200}, BACKENDS)
    assert not expected - armed
    # The paths are every key mode with each writer a backend has, and the cluster per writer.
    paths = {p.path for p in plans}
    assert paths == {path_of(m, "arrow") for m in MODES} | {path_of(m, "spark") for m in MODES} | {"C:*/A", "C:*/S"}
    # Every commit failpoint is armed on every path, resident and cluster alike.
    for path in paths:
        assert {p.commit_crashes[0].point for p in plans if p.path == path} == set(COMMIT_FAILPOINTS), path
    # The Arrow writer's failpoints are never dealt to Spark's writer, nor Spark's writer to the S3 backend.
    assert not [p for p in plans if p.engine == "spark" and p.crash.point in EXECUTOR_FAILPOINTS]
    assert not [p for p in plans if p.backend == "s3" and p.engine == "spark"]


@pytest.mark.parametrize("kind", ["host", "submit", "cluster"])
def test_commit_crashes_are_dealt_where_they_can_fire(kind: str) -> None:
    plans = [p for b in BACKENDS for p in _one_pass(Planner(7), kind, b)]
    for plan in plans:
        first = plan.commit_crashes[0].point
        if first in SNAPSHOT_POINTS:  # only the retain policy writes a snapshot
            assert plan.policy is RetentionPolicy.RETAIN, plan.describe()
        crash = plan.crash
        crash_leaves_one = crash.point in (SIGKILL, "sigkill.executor") or (
            crash.kind == "exit" and crash.point in ORPHAN_POINTS and crash.hit == 1
        )
        if first in ORPHAN_COMMIT_POINTS and not crash_leaves_one:
            # Reached only when there is an orphan to delete: the resumed run must leave one.
            resume = plan.resume_crash
            assert resume is not None, plan.describe()
            if plan.engine == "spark":
                # A failing seal of a task with files: the first seal of a resumed run may be an empty task's.
                assert resume.point == SEAL_WITH_FILES, plan.describe()
            else:
                assert resume.point in ORPHAN_POINTS and resume.kind == "exit", plan.describe()


def test_the_first_pass_fires_at_the_first_hit_later_passes_vary() -> None:
    planner = Planner(3)
    must, _ = deck_cells("host", "local")
    first = [planner.trial("local", i) for i in range(len(must))]
    later = [planner.trial("local", i) for i in range(len(must), 4 * len(must))]
    assert {p.crash.hit for p in first} == {1}
    assert max(p.crash.hit for p in later) > 1
    assert {p.crash.point for p in first if p.engine == "spark"} >= set(NATIVE_FAILPOINTS)
    submit = [planner.trial("local", i, own_driver=True) for i in range(len(deck_cells("submit", "local")[0]))]
    kills = [p.crash for p in submit if p.crash.point == SIGKILL]
    assert kills
    assert all(k.kill_after_first_checkpoint is not None and k.kill_after_first_checkpoint <= 0.5 for k in kills)


def test_replaying_a_trial_alone_deals_the_same_plan() -> None:
    """``--only local#41`` builds a fresh planner and asks for that trial alone."""
    campaign = Planner(20261127)
    dealt = [campaign.trial("local", i) for i in range(60)]
    assert Planner(20261127).trial("local", 41) == dealt[41]
    assert Planner(20261127).cluster_trial("s3", 11) == [campaign.cluster_trial("s3", i) for i in range(12)][11]


def test_the_mapped_deck_deals_every_point_once_per_pass_at_its_first_hit() -> None:
    from ckpt_testkit.faults import mapped_trials

    points = mapped_trials.MAPPED_CRASH_POINTS
    first = [mapped_trials.deal(20261127, i) for i in range(len(points))]
    assert sorted(t.point for t in first) == sorted(points)
    assert {t.hit for t in first} == {1}


def test_the_first_pass_kills_an_executor_soon_after_the_first_checkpoint() -> None:
    for backend in BACKENDS:
        planner = Planner(20261127)
        first = [planner.cluster_trial(backend, i) for i in range(len(deck_cells("cluster", backend)[0]))]
        kills = [p.crash for p in first if p.crash.point == "sigkill.executor"]
        assert kills and all((k.kill_after_first_checkpoint or 0.0) <= 0.3 for k in kills), kills
