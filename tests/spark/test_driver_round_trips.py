"""The row-key driver's bulk JVM paths give exactly what the per-item Py4J paths gave.

A row-key rerun learns the source's files and each scan task's file pieces (``scan_files``) and
filters out the done files (``without_files``). Both once cost one Py4J round trip per file or per
literal (4 s of a rerun's driver at 320 files): now the package jar describes a scan in one call and
the done files are one SQL ``IN`` list (one call, and a hash set per row). These tests hold the bulk
paths to the old answers, on file names with quotes, backslashes, commas, spaces, the identity
separator ``|`` and non-ASCII characters. The job result's one core conf is read in a call or two.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from airflow_ckpt_provider.spark.backend.classic import ClassicBackend, physical_plan, protocol_available, scan_files
from airflow_ckpt_provider.spark.plan import _plain_scan, source_listing
from airflow_ckpt_provider.spark.row_source import without_files

pytestmark = pytest.mark.spark

NAMES = ["plain", "it's", "a,b", "with space", "pipe|name", "naïve-ü", "plain-2", "über", "back\\slash's"]


def _inputs(tmp_path: Path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    for index, name in enumerate(NAMES):
        rows = 2000 + index
        pq.write_table(
            pa.table({"id": pa.array(range(index * 10_000, index * 10_000 + rows), pa.int64())}),
            folder / f"{name}.parquet",
            row_group_size=500,
        )
    return folder


def test_the_jar_describes_a_scan_exactly_as_the_py4j_walk(spark: SparkSession, tmp_path: Path) -> None:
    assert protocol_available(spark) is None
    folder = _inputs(tmp_path)
    context = spark.sparkContext
    previous = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", "4096")  # files split into several pieces
    try:
        df = spark.read.parquet(str(folder))
        plan = physical_plan(df)
        assert plan is not None
        scan = _plain_scan(plan)
        assert scan is not None
        walked = scan_files(scan.java, context._jvm)  # one round trip per value
        described = scan_files(scan.java, context._jvm, context._gateway)  # one call
    finally:
        spark.conf.set("spark.sql.files.maxPartitionBytes", previous or "128MB")
    assert described == walked
    assert sum(len(task) for task in walked) > len(NAMES)  # split pieces, not one per file
    assert {_name(piece.file.path) for task in walked for piece in task} == set(NAMES)


def _name(path: str) -> str:
    """The input name of a path as Spark's ``_metadata.file_path`` shows it (URL-encoded)."""
    return unquote(path.rsplit("/", 1)[-1]).removesuffix(".parquet")


def test_done_files_are_left_out_by_one_literal_whatever_their_names(spark: SparkSession, tmp_path: Path) -> None:
    folder = _inputs(tmp_path)
    df = spark.read.parquet(str(folder))
    listing = source_listing(ClassicBackend(spark), df)
    assert listing is not None and len(listing) == len(NAMES)
    done = [f for f in listing if _name(f.path) not in ("plain", "über", "a,b")]
    assert any("\\" in f.identity or "%5C" in f.identity for f in done), "a done name holds a backslash"
    left = [f for f in listing if f not in done]
    assert len(left) == 3
    pruned = without_files(df, [f.identity for f in done])
    assert pruned is not None
    # An IN list, which Spark turns into one hash-set lookup per row (InSet) above 10 files: never an
    # array of every done file scanned for each row.
    optimized = pruned._jdf.queryExecution().optimizedPlan().toString()
    assert " IN (" in optimized and "array_contains" not in optimized, optimized[:2000]
    # A row of a file not done is decided by its path alone (one hash lookup); only a row of a done path
    # builds its file's identity (size, time), which cost 30 % of a rerun's scan when every row built it.
    condition = optimized[optimized.index("Filter") : optimized.index("\n", optimized.index("Filter"))]
    assert " OR " in condition, condition[:500]
    assert condition.index("file_path") < condition.index(" OR ") < condition.index("concat_ws"), condition[:500]
    many = without_files(df, [f"{f.path}|{f.size + k}|{f.mtime_us}" for f in left for k in range(1, 5)])
    assert many is not None and "INSET" in many._jdf.queryExecution().optimizedPlan().toString().upper()
    # Names without a quote or a backslash go in one SQL expression: one Py4J call, not one per file.
    plain = [f.identity for f in listing if "'" not in f.identity and "\\" not in f.identity]
    assert len(plain) >= 5
    pruned_plain = without_files(df, plain)
    assert pruned_plain is not None and pruned_plain.count() == df.count() - sum(
        2000 + NAMES.index(_name(f.path)) for f in listing if f.identity in plain
    )
    # Spark prunes the done files when it plans the scan: the pruned frame reads only the others...
    leaf = physical_plan(pruned).java.collectLeaves().head()  # type: ignore[union-attr]
    context = spark.sparkContext
    read = {piece.file for task in scan_files(leaf, context._jvm, context._gateway) for piece in task}
    assert read == set(left)
    # ...and its rows are exactly theirs.
    expected = sum(2000 + NAMES.index(_name(f.path)) for f in left)
    assert pruned.count() == expected
    # An identity that differs only in size or time is a different file: nothing more is left out.
    stale = [f"{f.path}|{f.size + 1}|{f.mtime_us}" for f in left]
    stale += [f"{f.path}|{f.size}|{f.mtime_us + 1}" for f in left]
    assert without_files(df, stale).count() == df.count()  # type: ignore[union-attr]


def test_the_python_daemon_conf_is_read_in_a_round_trip_or_two(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every job result names the Python worker daemon (a core conf). ``getConf()`` copied each of the
    context's conf entries over Py4J (three calls per entry) to read that one key, three times per job."""
    import py4j.java_gateway as gateway

    from airflow_ckpt_provider.contract import CONF_PYTHON_DAEMON

    expected = spark.sparkContext.getConf().get(CONF_PYTHON_DAEMON, None)
    calls: list[str] = []
    real = gateway.JavaMember.__call__

    def counted(member: gateway.JavaMember, *args: object) -> object:
        calls.append(member.name)
        return real(member, *args)

    monkeypatch.setattr(gateway.JavaMember, "__call__", counted)
    assert ClassicBackend(spark).python_daemon() == expected
    assert len(calls) <= 2, calls


def _count_round_trips(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, every Py4J round trip of this test (its command's first line) is appended to the list."""
    import py4j.clientserver as clientserver

    trips: list[str] = []
    real = clientserver.ClientServerConnection.send_command

    def counted(connection: clientserver.ClientServerConnection, command: str) -> str:
        trips.append(command.split("\n", 1)[0])
        return real(connection, command)

    monkeypatch.setattr(clientserver.ClientServerConnection, "send_command", counted)
    return trips


def test_the_jar_is_reached_in_a_few_round_trips_once_its_methods_are_known(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row-key write asks twice whether the commit protocol's class loads and describes its source's scan
    twice. Looking a jar method up by reflection resolves every package and class name over Py4J (a dozen
    round trips, 0.1-0.2 s of the driver on a slow machine): done once per gateway and thread, every later
    call is the call itself."""
    folder = _inputs(tmp_path)
    plan = physical_plan(spark.read.parquet(str(folder)))
    assert plan is not None
    scan = _plain_scan(plan)
    assert scan is not None
    context = spark.sparkContext
    first = scan_files(scan.java, context._jvm, context._gateway)
    assert protocol_available(spark) is None
    trips = _count_round_trips(monkeypatch)
    assert scan_files(scan.java, context._jvm, context._gateway) == first
    assert len(trips) <= 4, trips
    trips.clear()
    assert protocol_available(spark) is None
    assert len(trips) <= 2, trips


def test_a_plan_nodes_column_names_are_read_in_two_round_trips(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer walks the plan to learn where its key column comes from and asks each node for its output
    names: two Py4J round trips per node (its schema as JSON), where one attribute at a time took two per
    column. The names are exactly the frame's, odd ones included."""
    from airflow_ckpt_provider.spark.backend.classic import JvmPlanNode

    names = ["id", "a.b", "it's", "naïve", "with space", "`tick`", 'quo"te'] + [f"c{i}" for i in range(8)]
    df = spark.range(3).select(*[(F.col("id") + i).alias(name) for i, name in enumerate(names)])
    plan = physical_plan(df)
    assert plan is not None
    node = JvmPlanNode(plan.java)
    trips = _count_round_trips(monkeypatch)
    assert node.output_names == frozenset(names)
    assert len(trips) <= 2, trips
