"""Airflow UI plugin: the Checkpoints views (task instance and DAG) and their API.

Registered through the ``airflow.plugins`` entry point
(``airflow_ckpt_provider.plugins.checkpoints:CheckpointsPlugin``).
"""
