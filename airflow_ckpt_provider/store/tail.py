"""The loose tail: sealing tasks keep the number of loose manifests under a bound.

Every reader of the state (done keys, progress, ``begin_epoch``) reads each loose manifest,
so the store stays fast only while they are few. The Spark driver folds them into segments
in the background, but a driver killed while its tasks seal (or one that falls behind 32
sealing threads) leaves them piling up. So sealers share the work, as Delta writes a
checkpoint every N commits: every ``check_every`` seals, a process counts the loose
manifests (one listing of ``checkpoints/``' directories: on S3 a request per 1,000), and
when they reach half the bound it folds batches of an eighth of the bound into segments
*before* sealing (back-pressure). One fold at a time per process: the other sealers of the process
that come due meanwhile wait for it, then count again. Best effort: a fold that fails is
logged and the seal goes on (docs/store-api.md, "The loose tail").

The bound holds per process as ``trigger + sealing threads * check_every`` (a thread seals
at most ``check_every`` times between two counts). Several processes folding at once mostly
fold different checkpoints (small batches from random starts), and a fold that loses the race
on the state object adds its segment to the newer state (store/compaction.py, ``_land``).
"""

from __future__ import annotations

import contextlib
import logging
import random
import threading
from typing import Any

from airflow_ckpt_provider.failpoints import failpoint
from airflow_ckpt_provider.store.compaction import Compactor
from airflow_ckpt_provider.store.context import StoreContext
from airflow_ckpt_provider.store.errors import InvalidArgumentError
from airflow_ckpt_provider.store.layout import CHECKPOINTS

log = logging.getLogger(__name__)

#: The default bound on loose manifests (store option ``max_loose_manifests``), and its largest value:
#: every reader of the state reads each loose manifest, so the bound is what keeps a resume fast
#: (about 0.5 ms per loose manifest of 100 keys on local disk; with 2,000, done keys in 0.5 s and
#: ``begin_epoch`` in 0.4 s at 20,000 sealed checkpoints, bench/results/README.md "Store tail").
#: A bound cannot be turned off: with none, 20,000 loose manifests cost 8-10 s per read.
DEFAULT_MAX_LOOSE = 2000
MAX_LOOSE_LIMIT = DEFAULT_MAX_LOOSE
#: Counts per bound: a process counts every ``max_loose // CHECKS_PER_BOUND`` seals.
CHECKS_PER_BOUND = 128
_FOLDS_PER_CHECK = 3


def loose_bound(value: Any) -> int:
    """``max_loose_manifests`` checked: an integer from 1 to :data:`MAX_LOOSE_LIMIT`, else
    :class:`InvalidArgumentError` naming the range."""
    bound: int | None = None
    if not isinstance(value, bool) and not (isinstance(value, float) and not value.is_integer()):
        with contextlib.suppress(TypeError, ValueError):
            bound = int(value)
    if bound is None or not 1 <= bound <= MAX_LOOSE_LIMIT:
        raise InvalidArgumentError(
            f"max_loose_manifests must be an integer from 1 to {MAX_LOOSE_LIMIT}, got {value!r}: every reader "
            "of the store reads each loose manifest, so the bound cannot be turned off or raised",
            reason="out_of_range",
        )
    return bound


class LooseTail:
    """Counts the loose manifests every few seals and folds a batch when they reach half the bound."""

    def __init__(self, context: StoreContext, compactor: Compactor, *, max_loose: int = DEFAULT_MAX_LOOSE) -> None:
        self._context = context
        self._blobs = context.blobs
        self._compactor = compactor
        self.max_loose = loose_bound(max_loose)
        self.check_every = max(1, self.max_loose // CHECKS_PER_BOUND)
        # A random phase: many processes that each seal a few times still count about once per
        # check_every seals in all.
        self._seals = random.randrange(self.check_every)
        self._count_lock = threading.Lock()
        self._fold_lock = threading.Lock()
        #: A count at which a fold found nothing it could fold (corrupt manifests, an older layout's
        #: unsealed directories): fold again only once the tail grew by a trigger's worth since.
        self._stuck_at: int | None = None
        self.folds = 0
        self.folded = 0
        self.lost_races = 0
        self.max_seen = 0

    @property
    def trigger(self) -> int:
        """The count at which a sealer folds (half the bound: room for the seals between two counts)."""
        return max(1, self.max_loose // 2)

    @property
    def batch(self) -> int:
        """What one fold takes at most: a quarter of the trigger, so that sealers of several processes
        folding at once mostly take different checkpoints (their folds then all land)."""
        return max(1, self.trigger // 4)

    def count(self) -> int:
        """Loose checkpoint directories now (one listing)."""
        count = len(self._blobs.list_dirs(CHECKPOINTS))
        self.max_seen = max(self.max_seen, count)
        return count

    def before_seal(self) -> None:
        """Called by each seal: every ``check_every`` seals, fold until the tail is under the trigger.
        Never raises."""
        with self._count_lock:
            self._seals += 1
            due = self._seals % self.check_every == 0
        if not due:
            return
        with self._fold_lock:
            try:
                self._fold_while_over()
            except Exception as exc:  # best effort: the seal does not depend on it
                log.warning("folding the loose manifests of %s failed (the seal goes on): %s", self._context.uri, exc)

    def _fold_while_over(self) -> None:
        for _ in range(_FOLDS_PER_CHECK):
            count = self.count()
            if count < self.trigger or (self._stuck_at is not None and count < self._stuck_at + self.trigger):
                return
            failpoint("store.tail.before_fold")
            result = self._compactor.compact(min_loose=1, limit=self.batch, delete_retired=False)
            self.folds += 1
            self.folded += result.checkpoints
            if result.lost_race:
                self.lost_races += 1
                continue  # another process folded meanwhile: count again
            if not (result.checkpoints or result.deleted_dirs):
                self._stuck_at = count
                log.info("%d loose directories in %s, none of them foldable now", count, self._context.uri)
                return
            self._stuck_at = None
