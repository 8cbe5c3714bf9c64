"""Every bad input of a reprocess action or of its preview is a 422 with an audit entry, never a 500
(docs/security.md). A preview that answers is a read and is not audited; a refused one is, marked
``preview``, so the audit log shows who sent malformed requests before any action."""

from __future__ import annotations

from typing import Any

import pytest

from tests.plugins.test_reprocess_app import HEADERS, body, committed_run, outputs
from tests.support.api_server import ApiServer

pytestmark = pytest.mark.airflow


@pytest.mark.parametrize(
    "selection",
    [{"sealed_after": "not-a-date"}, {"keys": [10**4000]}, {"keys": [[[[[[[[[[["deep"]]]]]]]]]]]}],
    ids=["not-a-date", "huge-integer", "deep-key"],
)
@pytest.mark.parametrize("endpoint", ["reprocess", "reprocess/preview"])
def test_a_bad_selection_is_422_and_audited(ui_server: ApiServer, selection: dict[str, Any], endpoint: str) -> None:
    run_id, _, out = committed_run(ui_server)
    with ui_server.client("admin") as admin:
        response = admin.post(
            f"/checkpoints/api/task/{endpoint}",
            json=body(run_id, selection=selection, expected="0" * 64),
            headers=HEADERS,
        )
    assert response.status_code == 422, response.text
    assert "0000000000" not in response.text, "the input is not echoed back"
    refused = [e for e in ui_server.audit_entries(run_id) if e["event"].endswith(".failed")]
    assert refused and refused[-1]["extra"]["http_status"] == 422, refused
    assert refused[-1]["extra"].get("preview", False) is (endpoint == "reprocess/preview"), refused[-1]
    assert len(outputs(out)) == 3
