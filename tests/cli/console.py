"""Run the installed ``airflow-ckpt`` console script as a user would (a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "airflow-ckpt"


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str
    seconds: float


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This environment without Airflow or AWS settings of the caller, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))}
    env.update(extra or {})
    return env


def airflow_ckpt(*argv: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> Outcome:
    started = time.monotonic()
    proc = subprocess.run(
        [str(SCRIPT), *argv],
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return Outcome(proc.returncode, proc.stdout, proc.stderr, time.monotonic() - started)
