"""TaskFlow: checkpointed ``PySparkOperator`` and ``@task.checkpointed_pyspark``.

The one Airflow-side layer that runs the Spark *client* in the worker process (as the Spark
provider's ``@task.pyspark`` does): a local ``local[*]`` session, or a Spark Connect session
from a ``spark_connect`` connection. It imports ``airflow_ckpt_provider.spark`` lazily, when a
task runs, and never imports pyspark itself (the Spark provider's operator builds the session).
See docs/design.md, section 2.1.
"""
