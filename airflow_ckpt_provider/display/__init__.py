"""What the command line and the Airflow UI show a person about a store, shared by both.

Imports the store only (neither Airflow nor Spark): the CLI runs without Airflow.
"""
