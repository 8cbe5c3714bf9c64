"""Test DAG: a deferrable CheckpointSensor watching a store another process writes to."""

from __future__ import annotations

import os

from airflow.sdk import DAG

from airflow_ckpt_provider.sensors.checkpoint import CheckpointSensor

with DAG("ckpt_sensor", schedule=None, catchup=False) as dag:
    CheckpointSensor(
        task_id="wait_partitions",
        checkpoint_uri=os.environ.get("SENSOR_STORE", "/tmp/missing-store"),
        wait_for="partitions",
        deferrable=True,
        poke_interval=1,
        timeout=900,
    )
