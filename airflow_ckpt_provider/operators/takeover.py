"""Whether a submit may take over an epoch that another task instance left open.

Every run of a job shares one store (``hooks/default_location.py``), so a run that was killed
(worker lost, ``airflow dags test`` interrupted, run marked failed) leaves its epoch open for the
next run of the same day, which would fail with ``EpochConflictError`` until someone discards it.
The submit asks the metadata DB, through the task's own Execution API channel, about the task
instance that opened the epoch (its owner, recorded in the epoch). The epoch is taken over only
when that instance cannot be running any more:

* it is no longer in the metadata DB (its run was deleted: ``airflow dags test`` replaces the
  earlier run of the same logical date);
* its state is ``failed``, ``upstream_failed``, ``skipped`` or ``removed``.

Airflow agrees: a task's supervisor terminates the task when its heartbeat is answered 404 (the
instance is gone) or 409 (it is not running any more).

Every other state keeps the conflict: ``running``, ``queued``, ``scheduled``, ``deferred`` and
``restarting`` are in flight; ``up_for_retry`` and ``up_for_reschedule`` come back (and a retry
takes over its own epoch, or re-attaches to its driver); ``success`` with an open epoch is a
detached cluster driver (``wait_for_completion=False``) that a sensor and the commit still wait
for; no state (just cleared) is about to run. When the DB cannot answer, nothing is taken over.

Fencing stays the store's: the takeover is one ``store.epochs.begin(takeover_epoch=N)``, which opens
N+1 only if N is still the latest epoch (create-if-absent), so an owner that came back and
opened an epoch meanwhile is never superseded. From then on the old epoch's writers are fenced
and their late seals never count; what it sealed before is the new epoch's base (skipped), and
its unsealed files are orphans the commit deletes.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_ckpt_provider.store import Epoch, EpochStatus
from airflow_ckpt_provider.store.owner import EpochOwner

log = logging.getLogger(__name__)

#: Task instance states in which the owner of an open epoch is surely not running any more.
ENDED_STATES = frozenset({"failed", "upstream_failed", "skipped", "removed"})


def owner_not_running(ti: Any, owner: EpochOwner) -> str | None:
    """Why the metadata DB says ``owner`` is not running (a sentence), or None when it may be
    running or the DB cannot say. ``ti``: the asking task's runtime task instance."""
    get_task_states = getattr(ti, "get_task_states", None)
    if get_task_states is None:
        return None
    try:
        states = get_task_states(
            dag_id=owner.dag_id, map_index=owner.map_index, task_ids=[owner.task_id], run_ids=[owner.run_id]
        )
    except Exception as exc:  # the DB's answer decides a takeover: without one, take nothing over
        log.warning("Could not read the state of %s from the metadata DB: %s", owner.describe(), exc)
        return None
    found = (states or {}).get(owner.run_id) or {}
    # The Execution API names a mapped instance "{task_id}_{map_index}".
    name = f"{owner.task_id}_{owner.map_index}" if owner.mapped else owner.task_id
    if name not in found:
        return "it is no longer in the metadata DB (its run was deleted)"
    state = found[name]
    text = str(getattr(state, "value", state) or "").lower()
    return f"its state in the metadata DB is {text}" if text in ENDED_STATES else None


def takeover_of_ended_owner(latest: Epoch | None, owner: EpochOwner, ti: Any) -> dict[str, Any] | None:
    """The takeover a submit of ``owner`` may do on a store whose latest epoch is ``latest``:
    ``{"epoch", "owner", "reason"}`` when it is open and held by another task instance that is not
    running (see the module docstring), else None."""
    if latest is None or latest.status is not EpochStatus.OPEN or latest.owner == owner.key():
        return None
    holder = EpochOwner.from_epoch(latest)
    if holder is None:  # opened by a maintenance action or a job outside Airflow: nobody to ask
        return None
    reason = owner_not_running(ti, holder)
    if reason is None:
        return None
    return {"epoch": latest.number, "owner": holder.key(), "reason": reason}
