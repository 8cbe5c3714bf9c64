"""The commit task of the campaign, as its own process: ``python commit_step.py SPEC``.

``SPEC`` is JSON: ``store_uri``, ``output_roots``, ``degraded``, ``policy``. Store
options come from ``FAULT_JOB_STORE_OPTIONS``; failpoints from ``CKPT_FAILPOINTS``
(an ``exit`` failpoint ends this process with code 17, mid-commit). Prints
``COMMIT_RESULT {json}``: the commit's summary and what retention removed.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..")))

from airflow_ckpt_provider.store import open_store

OPTIONS_ENV = "FAULT_JOB_STORE_OPTIONS"
RESULT_PREFIX = "COMMIT_RESULT "


def main() -> int:
    spec = json.loads(sys.argv[1])
    options = json.loads(os.environ.get(OPTIONS_ENV) or "{}")
    store = open_store(spec["store_uri"], **options)
    result = store.commit(spec.get("output_roots"), degraded=bool(spec.get("degraded")))
    removed = store.housekeeping.cleanup(spec.get("policy", "delete_after_success"))
    summary = {"result": result.to_json(), "removed": removed}
    print(RESULT_PREFIX + json.dumps(summary, default=str), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
