"""The Checkpoints tab's map index, from the UI page that framed it (no server needed).

Airflow 3.3 fills ``{MAP_INDEX}`` in an external view's href only on a mapped instance's page
(route ``dags/:dagId/runs/:runId/tasks/:taskId/mapped/:mapIndex``) and leaves it unfilled on
every other page, so the tab's href carries no map index; the view reads it from the
``Referer`` of the iframe's request. The browser half (Chromium sends that Referer) is in
test_browser.py.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest

from airflow_ckpt_provider.plugins.checkpoints import TASK_VIEW
from airflow_ckpt_provider.plugins.flow import framing_map_index

RUN = "manual__2024-06-01T00:00:00+00:00"


def test_the_tab_href_carries_no_placeholder_the_ui_may_leave_unfilled() -> None:
    assert "{MAP_INDEX}" not in TASK_VIEW["href"] and "map_index" not in TASK_VIEW["href"]
    assert all(f"{{{name}}}" in TASK_VIEW["href"] for name in ("DAG_ID", "RUN_ID", "TASK_ID"))


@pytest.mark.parametrize(
    ("referer", "expected"),
    [
        (f"http://h/dags/d/runs/{quote(RUN)}/tasks/t/mapped/3/plugin/checkpoints", 3),
        (f"http://h/base/dags/d/runs/{RUN}/tasks/t/mapped/12", 12),  # under [api] base_url, not encoded
        (f"http://h/dags/d/runs/{quote(RUN)}/tasks/t/plugin/checkpoints", -1),  # not mapped
        (f"http://h/dags/d/runs/{quote(RUN)}/tasks/other/mapped/3/plugin/checkpoints", -1),  # another task
        ("http://h/dags/d/runs/other_run/tasks/t/mapped/3/plugin/checkpoints", -1),  # another run
        ("http://h/dags/d/runs/r/tasks/t/mapped/x/plugin/checkpoints", -1),  # not a number
        (f"http://h/dags/d/runs/{quote(RUN)}/tasks/t/mapped", -1),  # no index
        (None, -1),
        ("", -1),
    ],
)
def test_the_map_index_comes_from_that_task_instances_page_only(referer: str | None, expected: int) -> None:
    assert framing_map_index(referer, "d", RUN, "t") == expected
