"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

from __future__ import annotations

from typing import Any

from airflow_ckpt_provider import __version__


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "airflow-ckpt-provider",
        "name": "Checkpointed Spark",
        "description": "Resumable, exactly-once Spark batch jobs: key-level checkpoints, "
        "skip-on-resume and a commit that deletes orphaned output.",
        "versions": [__version__],
        "hooks": [
            {
                "integration-name": "Checkpointed Spark",
                "python-modules": ["airflow_ckpt_provider.hooks.checkpoint"],
            }
        ],
        "operators": [
            {
                "integration-name": "Checkpointed Spark",
                "python-modules": [
                    "airflow_ckpt_provider.operators.spark_submit",
                    "airflow_ckpt_provider.operators.commit",
                    "airflow_ckpt_provider.operators.clear",
                    "airflow_ckpt_provider.operators.reprocess",
                    "airflow_ckpt_provider.taskflow.operator",
                ],
            }
        ],
        "task-decorators": [
            {
                "name": "checkpointed_pyspark",
                "class-name": "airflow_ckpt_provider.taskflow.decorator.checkpointed_pyspark_task",
            }
        ],
        "sensors": [
            {
                "integration-name": "Checkpointed Spark",
                "python-modules": ["airflow_ckpt_provider.sensors.checkpoint"],
            }
        ],
        "triggers": [
            {
                "integration-name": "Checkpointed Spark",
                "python-modules": ["airflow_ckpt_provider.triggers.checkpoint"],
            }
        ],
        "integrations": [
            {
                "integration-name": "Checkpointed Spark",
                "external-doc-url": "https://pypi.org/project/airflow-ckpt-provider/",
                "tags": ["apache", "software"],
            }
        ],
        "config": {
            "ckpt": {
                "description": "Checkpoint stores of checkpointed Spark jobs.",
                "options": {
                    "base_uri": {
                        "description": "Where stores live. Empty: local, under $AIRFLOW_HOME/checkpoints. "
                        "Each task gets {base_uri}/{dag_id}/{task_id}/{run_id} unless the operator "
                        "names its own checkpoint_uri.",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "s3://my-bucket/checkpoints",
                        "default": "",
                    },
                    "aws_conn_id": {
                        "description": "Airflow connection for s3:// stores (empty: boto3's default chain).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "aws_default",
                        "default": "",
                    },
                    "retention_policy": {
                        "description": "delete_after_success (per-run resume) or retain (incremental).",
                        "version_added": "0.1.0",
                        "type": "string",
                        "example": "retain",
                        "default": "delete_after_success",
                    },
                    "breaker_max_failures": {
                        "description": "Consecutive store failures after which a job stops checkpointing "
                        "and finishes anyway (the run is marked degraded).",
                        "version_added": "0.1.0",
                        "type": "integer",
                        "example": "3",
                        "default": "3",
                    },
                    "store_timeout_seconds": {
                        "description": "Timeout of each store request (connect and read).",
                        "version_added": "0.1.0",
                        "type": "float",
                        "example": "10",
                        "default": "10",
                    },
                    "ui_store_deadline_seconds": {
                        "description": "The Checkpoints view answers within this many seconds whatever its "
                        "store does (an unreachable store shows as a message, not a hanging page).",
                        "version_added": "0.2.0",
                        "type": "float",
                        "example": "5",
                        "default": "5",
                    },
                    "ui_action_deadline_seconds": {
                        "description": "How long a Clear or Discard from the Checkpoints view may take.",
                        "version_added": "0.2.0",
                        "type": "float",
                        "example": "120",
                        "default": "120",
                    },
                    "ui_max_concurrent_store_calls": {
                        "description": "Store reads of the Checkpoints view running at once per API-server "
                        "process; more wait for a slot until their deadline (so slow stores never take "
                        "Airflow's own API down).",
                        "version_added": "0.2.0",
                        "type": "integer",
                        "example": "4",
                        "default": "4",
                    },
                    "ui_max_concurrent_actions": {
                        "description": "Previews and actions (clear, discard, reprocess, undo, resume) of the "
                        "Checkpoints view running at once per API-server process, on threads of their own: they "
                        "never take the slots of pages, however slow their stores.",
                        "version_added": "0.2.0",
                        "type": "integer",
                        "example": "2",
                        "default": "2",
                    },
                    "trusted_output_roots": {
                        "description": "Comma-separated output roots (file:///dir, s3://bucket/prefix) that "
                        "anchor deletions for DAGs whose operators declare no output_roots: a commit, clear or "
                        "reprocess then acts on the roots the store records only where they lie under one of "
                        "these. Empty: such DAGs keep every output file (and their tasks say so).",
                        "version_added": "0.2.0",
                        "type": "string",
                        "example": "s3://lake/warehouse,file:///data/out",
                        "default": "",
                    },
                    "ui_trust_forwarded_headers": {
                        "description": "Believe X-Forwarded-Host/X-Forwarded-Proto when checking that a "
                        "Clear comes from Airflow's own pages. Only behind a proxy that sets (and overwrites) "
                        "them; otherwise set [api] base_url to the public address.",
                        "version_added": "0.2.0",
                        "type": "boolean",
                        "example": "True",
                        "default": "False",
                    },
                },
            }
        },
    }
