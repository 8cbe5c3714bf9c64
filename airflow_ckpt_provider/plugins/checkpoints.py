"""``CheckpointsPlugin``: what the provider adds to Airflow's API server and UI.

* a FastAPI app mounted at ``/checkpoints`` (see :mod:`.app`);
* a "Checkpoints" tab on the task-instance page and one on the DAG page. Both are
  ``external_views``: the UI shows the plugin's page in a same-origin iframe, fills
  ``{DAG_ID}``, ``{RUN_ID}`` and ``{TASK_ID}`` into ``href``, and the browser sends the
  UI's session cookie along, so the page is authorized like the UI itself. ``href`` has no
  ``{MAP_INDEX}``: Airflow 3.3 fills it only on a mapped task instance's page and leaves it
  as written on every other one. The view takes the map index from the page that framed
  it instead (the ``Referer``, ``.../tasks/{task}/mapped/{i}/...``; see :mod:`.app`).

Every Airflow process loads plugins (scheduler, workers, DAG processor), but only
the API server asks for ``fastapi_apps``; the app (and FastAPI with it) is built
on that first request, not at import.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.plugins_manager import AirflowPlugin

#: Where the app is mounted on the API server (relative hrefs below must agree).
URL_PREFIX = "/checkpoints"

# hrefs are relative (no leading slash): the UI resolves them against its <base href>,
# so the views also work when Airflow is served under a path ([api] base_url).
TASK_VIEW = {
    "name": "Checkpoints",
    "href": "checkpoints/ui/task?dag_id={DAG_ID}&run_id={RUN_ID}&task_id={TASK_ID}",
    "destination": "task_instance",
    "url_route": "checkpoints",
}
DAG_VIEW = {
    "name": "Checkpoints",
    "href": "checkpoints/ui/dag?dag_id={DAG_ID}",
    "destination": "dag",
    "url_route": "dag-checkpoints",
}


class CheckpointsPlugin(AirflowPlugin):
    name = "checkpoints"
    external_views = [TASK_VIEW, DAG_VIEW]

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_ckpt_provider.plugins.app import create_app

        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Checkpoints"}]
