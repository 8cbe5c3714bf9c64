"""Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point, and the
``[ckpt]`` configuration options, defined once here: Airflow's ``airflow config`` reads them from
:func:`get_provider_info`, ``hooks/config.py`` takes its defaults from them, and the README's table of
them is rendered from them (:func:`config_table_markdown`; ``tests/test_readme.py`` checks it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_ckpt_provider import __version__

SECTION = "ckpt"


@dataclass(frozen=True)
class ConfigOption:
    """One option of the ``[ckpt]`` section (``AIRFLOW__CKPT__<NAME>``)."""

    name: str
    type: str  # Airflow's config types: string, integer, float, boolean
    default: str
    example: str
    description: str
    version_added: str = "0.1.0"

    def provider_info(self) -> dict[str, str]:
        return {
            "description": self.description,
            "version_added": self.version_added,
            "type": self.type,
            "example": self.example,
            "default": self.default,
        }


CONFIG_OPTIONS: tuple[ConfigOption, ...] = (
    ConfigOption(
        "base_uri",
        "string",
        "",
        "s3://my-bucket/checkpoints",
        "Where stores live (file:///dir, /dir or s3://bucket/prefix). Empty: local, under "
        "$AIRFLOW_HOME/checkpoints, for one machine only (LocalExecutor, Spark local mode): where "
        "another host must read a store (another executor, a Spark cluster) the submit is refused; "
        "a file:// base named here is taken as a shared file system. Each job (task, map index and logical date) gets "
        "{base_uri}/{dag_id}/{task_id}/date={logical date}[/map_index={i}] (run={run_id} for a run "
        "without a logical date) unless its operator names its own checkpoint_uri.",
    ),
    ConfigOption(
        "aws_conn_id",
        "string",
        "",
        "aws_default",
        "Airflow connection for s3:// stores (empty: boto3's default chain).",
    ),
    ConfigOption(
        "retention_policy",
        "string",
        "delete_after_success",
        "retain",
        "delete_after_success (per-run resume: a commit deletes the checkpoints) or retain (incremental "
        "processing: committed keys compacted into one snapshot).",
    ),
    ConfigOption(
        "breaker_max_failures",
        "integer",
        "3",
        "3",
        "Consecutive store failures after which a job stops checkpointing and finishes anyway "
        "(the run is marked degraded).",
    ),
    ConfigOption(
        "store_timeout_seconds",
        "float",
        "10",
        "10",
        "Timeout of each store request (connect and read).",
    ),
    ConfigOption(
        "trusted_output_roots",
        "string",
        "",
        "s3://lake/warehouse,file:///data/out",
        "Comma-separated output roots (file:///dir, s3://bucket/prefix) that anchor deletions for DAGs "
        "whose operators declare no output_roots: a commit, clear or reprocess then acts on the roots the "
        "store records only where they lie under one of these. Empty: such DAGs keep every output file "
        "(and their tasks say so).",
        "0.2.0",
    ),
    ConfigOption(
        "ui_store_deadline_seconds",
        "float",
        "5",
        "5",
        "The Checkpoints view answers within this many seconds whatever its store does (an unreachable "
        "store shows as a message, not a hanging page).",
        "0.2.0",
    ),
    ConfigOption(
        "ui_action_deadline_seconds",
        "float",
        "120",
        "120",
        "How long a Clear or Discard from the Checkpoints view may take.",
        "0.2.0",
    ),
    ConfigOption(
        "ui_max_concurrent_store_calls",
        "integer",
        "4",
        "4",
        "Store reads of the Checkpoints view running at once per API-server process; more wait for a "
        "slot until their deadline (so slow stores never take Airflow's own API down).",
        "0.2.0",
    ),
    ConfigOption(
        "ui_max_concurrent_actions",
        "integer",
        "2",
        "2",
        "Previews and actions (clear, discard, reprocess, undo, resume) of the Checkpoints view running "
        "at once per API-server process, on threads of their own: they never take the slots of pages, "
        "however slow their stores.",
        "0.2.0",
    ),
    ConfigOption(
        "ui_trust_forwarded_headers",
        "boolean",
        "False",
        "True",
        "Believe X-Forwarded-Host/X-Forwarded-Proto when checking that a Clear comes from Airflow's own "
        "pages. Only behind a proxy that sets (and overwrites) them; otherwise set [api] base_url to the "
        "public address.",
        "0.2.0",
    ),
)

#: The README's table of options lies between these lines.
README_BEGIN = "<!-- ckpt-config: rendered from provider_info.CONFIG_OPTIONS -->"
README_END = "<!-- /ckpt-config -->"


def config_table_markdown() -> str:
    """The README's table of the ``[ckpt]`` options, markers included."""
    lines = [README_BEGIN, "", "| option | default | what |", "|---|---|---|"]
    for option in CONFIG_OPTIONS:
        default = f"`{option.default}`" if option.default else "(empty)"
        lines.append(f"| `{option.name}` | {default} | {option.description} |")
    return "\n".join([*lines, "", README_END])


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
            SECTION: {
                "description": "Checkpoint stores of checkpointed Spark jobs.",
                "options": {option.name: option.provider_info() for option in CONFIG_OPTIONS},
            }
        },
    }
