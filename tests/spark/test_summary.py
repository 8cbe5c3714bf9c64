"""``spark/summary.py``: the driver's ``CKPT_RESULT`` line, found in a driver log (no Spark needed)."""

from __future__ import annotations

from airflow_ckpt_provider.spark import parse_result_line


def test_result_line_is_found_in_a_driver_log() -> None:
    log = 'INFO start\nCKPT_RESULT {"degraded": false, "keys": 3}\nnoise CKPT_RESULT {"degraded": true, "keys": 4}\n'
    assert parse_result_line(log) == {"degraded": True, "keys": 4}
    assert parse_result_line("nothing here") is None
