"""Circuit breaker that keeps the store off a job's critical path (docs/design.md, invariant 6).

After ``max_failures`` consecutive store failures the breaker trips: writer calls
become no-ops, one warning is logged, and the owner marks the run degraded so the
commit deletes nothing it cannot prove orphaned. A success resets the count.
"""

from __future__ import annotations

import logging
import threading

from airflow_ckpt_provider.store.errors import InvalidArgumentError

log = logging.getLogger(__name__)


class CircuitBreaker:
    def __init__(self, max_failures: int = 3) -> None:
        if max_failures < 1:
            raise InvalidArgumentError(
                f"breaker_max_failures must be at least 1, got {max_failures}", reason="out_of_range"
            )
        self.max_failures = max_failures
        self.consecutive_failures = 0
        self.total_failures = 0
        self.tripped = False
        self._lock = threading.Lock()

    def record_success(self) -> None:
        with self._lock:
            self.consecutive_failures = 0

    def record_failure(self, what: str, exc: BaseException) -> bool:
        """Count a failure; returns True if this failure tripped the breaker."""
        with self._lock:
            self.consecutive_failures += 1
            self.total_failures += 1
            if self.tripped or self.consecutive_failures < self.max_failures:
                log.info(
                    "checkpoint store failure %d/%d (%s): %s",
                    self.consecutive_failures,
                    self.max_failures,
                    what,
                    exc,
                )
                return False
            self.tripped = True
        log.warning(
            "checkpoint store failed %d times in a row (last: %s: %s); checkpointing is OFF for the rest "
            "of this process. The job continues; this run is degraded: it will not be resumable, and the "
            "commit will keep every file it cannot prove orphaned.",
            self.max_failures,
            what,
            exc,
        )
        return True
