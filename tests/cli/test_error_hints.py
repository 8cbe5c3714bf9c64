"""Errors that tell a user what to run name commands and parameters that exist."""

from __future__ import annotations

import inspect
import re
import shlex
from pathlib import Path

from airflow_ckpt_provider.cli.main import build_parser, main
from airflow_ckpt_provider.operators.spark_submit import CheckpointedSparkSubmitOperator
from airflow_ckpt_provider.store import open_store
from airflow_ckpt_provider.store.errors import EpochConflictError
from tests.support.errors import raises_reason


def test_an_open_epoch_of_another_owner_names_remedies_that_exist(tmp_path: Path) -> None:
    uri = (tmp_path / "store").as_uri()
    store = open_store(uri)
    store.epochs.begin(owner="dag/submit/run-1")
    with raises_reason(EpochConflictError, "epoch_open") as raised:
        store.epochs.begin(owner="dag/submit/run-2")
    message = str(raised.value)

    parameters = re.findall(r"(\w+)=True", message)
    assert parameters, message
    accepted = inspect.signature(CheckpointedSparkSubmitOperator.__init__).parameters
    assert all(p in accepted for p in parameters), parameters

    commands = re.findall(r"`(airflow-ckpt [^`]+)`", message)
    assert commands, message
    for command in commands:
        argv = shlex.split(command)[1:]
        build_parser().parse_args(argv)  # exits (SystemExit) on an unknown subcommand or flag
        # ... and doing it really unblocks the store: the other owner's submit can open its epoch.
        assert main([*argv, "--yes"]) == 0
    open_store(uri).epochs.begin(owner="dag/submit/run-2")
