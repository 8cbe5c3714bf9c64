"""How big a campaign is: trial counts and the seed, from the environment (CI defaults are small).

``CKPT_FAULT_SEED``            campaign seed (default: drawn at random and printed)
``CKPT_FAULT_TRIALS``          failpoint trials per backend in the resident Spark host (default 2)
``CKPT_FAULT_SUBMIT_TRIALS``   SIGKILL / driver-exit trials per backend, each a spark-submit (default 1)
``CKPT_FAULT_STORE_TRIALS``    store-fault trials through the proxy (default 5: one per fault)
``CKPT_FAULT_RACES``           begin_epoch races per backend (default 100)
``CKPT_FAULT_DOUBLE_SUBMITS``  pairs of real spark-submits started together (default 1)
``CKPT_FAULT_REPROCESS_TRIALS`` reprocess/rewind/undo/purge crash trials per backend (default 6; 36 deals
                               every action x failpoint x crash kind once)
``CKPT_FAULT_HISTORY_TRIALS``  random store histories with crashes armed at their steps (default 1;
                               tests/spark/test_histories.py, ckpt_testkit/histories.py)
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


@dataclass(frozen=True)
class CampaignSettings:
    seed: int
    trials: int
    submit_trials: int
    store_trials: int
    races: int
    double_submits: int
    reprocess_trials: int = 6
    history_trials: int = 1

    @classmethod
    def from_env(cls) -> CampaignSettings:
        return cls(
            seed=_int("CKPT_FAULT_SEED", random.SystemRandom().randrange(1, 10**6)),
            trials=_int("CKPT_FAULT_TRIALS", 2),
            submit_trials=_int("CKPT_FAULT_SUBMIT_TRIALS", 1),
            store_trials=_int("CKPT_FAULT_STORE_TRIALS", 5),
            races=_int("CKPT_FAULT_RACES", 100),
            double_submits=_int("CKPT_FAULT_DOUBLE_SUBMITS", 1),
            reprocess_trials=_int("CKPT_FAULT_REPROCESS_TRIALS", 6),
            history_trials=_int("CKPT_FAULT_HISTORY_TRIALS", 1),
        )

    def replay_hint(self) -> str:
        return f"CKPT_FAULT_SEED={self.seed} .venv/bin/python -m pytest tests/faults -m faults"
