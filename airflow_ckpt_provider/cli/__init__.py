"""The ``airflow-ckpt`` command-line tool. Imports Airflow only when a command names a task instance."""
