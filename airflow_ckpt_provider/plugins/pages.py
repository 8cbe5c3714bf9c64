"""Server-rendered HTML of the Checkpoints views (Jinja2, autoescaped).

The pages hold all their numbers in the HTML itself, so they show without any
script; ``static/checkpoints.js`` only adds the confirmation dialogs and the calls
behind the Clear and Discard buttons. All links are relative, so the views work
under any ``[api] base_url``.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jinja2

from airflow_ckpt_provider import __version__
from airflow_ckpt_provider.display.units import human_bytes

TEMPLATES = Path(__file__).parent / "templates"


@cache
def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
    )
    env.filters["bytes"] = human_bytes
    env.filters["number"] = lambda n: "-" if n is None else f"{n:,}"
    env.filters["short_id"] = lambda cid: cid[:8] if isinstance(cid, str) else cid
    env.globals["version"] = __version__
    return env


def _render(name: str, **context: Any) -> str:
    return _environment().get_template(name).render(**context)


def render_task(body: dict[str, Any]) -> str:
    report = body.get("report")
    progress = (report or {}).get("progress") or {}
    expected = progress.get("expected_partitions")
    sealed = progress.get("sealed_partitions") or 0
    percent = None if not expected else min(100, round(100 * sealed / expected))
    return _render(
        "task.html",
        page=body,
        report=report,
        progress=progress,
        epoch=progress.get("epoch"),
        percent=percent,
    )


def render_dag(body: dict[str, Any]) -> str:
    return _render("dag.html", page=body)


def render_error(status_code: int, message: str, login_url: str | None) -> str:
    return _render("error.html", status_code=status_code, message=message, login_url=login_url)
