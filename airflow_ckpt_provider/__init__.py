"""Resumable, exactly-once Spark batch jobs for Apache Airflow.

Importing this package imports neither Airflow nor Spark: ``store`` ships to Spark
executors, ``spark`` runs in the driver and executors, and the Airflow layers
(``hooks``, ``operators``, ``sensors``, ``triggers``, ``plugins``) run on Airflow.
"""

__version__ = "0.1.0"
