"""Airflow's simple auth manager plus per-DAG rights, for the attack tests of the Checkpoints view.

A real deployment gives per-DAG rights through FAB or a custom auth manager; here a small
subclass does: users named in ``CKPT_TEST_DAG_RIGHTS`` (JSON ``{"user": {"dag_id": "read" |
"edit"}}``) may touch only the DAGs listed for them, every other user keeps the simple auth
manager's role-based rights. The API server loads it through ``[core] auth_manager``.
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

RIGHTS_ENV = "CKPT_TEST_DAG_RIGHTS"


@cache
def dag_rights() -> dict[str, dict[str, str]]:
    return dict(json.loads(os.environ.get(RIGHTS_ENV, "{}")))


class PerDagAuthManager(SimpleAuthManager):
    def is_authorized_dag(self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None) -> bool:
        rights = dag_rights().get(user.get_name())
        if rights is None:
            return bool(
                super().is_authorized_dag(method=method, user=user, access_entity=access_entity, details=details)
            )
        level = rights.get(details.id) if details is not None and details.id else None
        if level is None:
            return False
        return method == "GET" or level == "edit"
