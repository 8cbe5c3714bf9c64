"""Reprocess and rewind: make part of a store pending again and retract the output it produced.

See docs/reprocess.md for the design (records, fencing, steps and crash points).
``store.reprocessing`` is ``service.Reprocessing``, built once from the store's parts
(``store/parts.py``): nothing here imports the facade. The store's
own modules use ``maintenance`` (refusals, check), ``lineage`` (commit, compaction) and
``records`` (committed output minus retractions), which import none of the modules that use
them, so the imports between the store and this package point one way.
"""

from airflow_ckpt_provider.store.reprocess.model import REPROCESS_FAILPOINTS, ReprocessRecord, Selection
from airflow_ckpt_provider.store.reprocess.plan import PlannedFile, ReprocessPlan, ReprocessResult

__all__ = [
    "REPROCESS_FAILPOINTS",
    "PlannedFile",
    "ReprocessPlan",
    "ReprocessRecord",
    "ReprocessResult",
    "Selection",
]
