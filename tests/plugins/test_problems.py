"""``plugins/problems.py``: what the Checkpoints view says about a failure never carries a credential."""

from __future__ import annotations

import json

import pytest

from airflow_ckpt_provider.hooks.checkpoint import CheckpointHook
from airflow_ckpt_provider.plugins.problems import problem_from, scrub
from airflow_ckpt_provider.store.errors import StoreUnavailableError

SECRET = "scrub-me-secret-key-9f8e7d6c5b4a"


def test_a_credential_read_by_a_hook_is_scrubbed_without_being_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook reads the connection; any later message quoting its key loses it, even when the
    caller did not hand the key to ``scrub`` (it only knew the store URI)."""
    monkeypatch.setenv(
        "AIRFLOW_CONN_SCRUB_TEST",
        json.dumps({"conn_type": "aws", "login": "scrub-access-key", "password": SECRET}),
    )
    hook = CheckpointHook("s3://bucket/prefix", aws_conn_id="scrub_test")
    assert hook.secret_store_options["aws_secret_access_key"] == SECRET
    assert scrub(f"SignatureDoesNotMatch for key {SECRET} on s3://bucket") == (
        "SignatureDoesNotMatch for key *** on s3://bucket"
    )
    problem = problem_from(StoreUnavailableError(f"bad key {SECRET}", reason="unreachable"), "s3://bucket/prefix")
    assert SECRET not in json.dumps(problem.to_json())


def test_uri_credentials_and_queries_are_dropped() -> None:
    message = "cannot open s3://user:pw-1234@host/b?X-Amz-Signature=abcd and https://k:v@h/p?token=zz"
    assert scrub(message) == "cannot open s3://host/b and https://h/p"
