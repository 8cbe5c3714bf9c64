"""The ``airflow-ckpt`` command-line tool. Imports Airflow only when a command names a task instance."""

from airflow_ckpt_provider.moved_modules import register_moved_modules

register_moved_modules(
    __name__,
    {
        "target": "airflow_ckpt_provider.cli.store_selection",
        "preview": "airflow_ckpt_provider.display.deletion_preview",
    },
)
