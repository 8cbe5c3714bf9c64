"""The campaign's example workload: tiny Parquet inputs, the output a fault-free run makes, and reading it back.

400 input rows in 8 files. Each row has a unique ``row_id``, a row key ``key``
(4 rows per key, spread over several files, so row keys need a shuffle) and a
``value``. Rounds split the input for incremental runs: round 1 reads files 0-5
(keys k000-k074), round 2 all 8 files (adds keys k075-k099), so no key of round 2
is new input for an old key. The job rewrites ``key`` (trim + upper-case) and
adds ``value2`` — the checkpoint must still hold the key as read.

Key modes (the job's ``mode``): ``files`` (the file's URI), ``rows`` (``key``, 4 rows
each), ``rows-unique`` (``row_id``) and ``rows-composite`` (``key`` with the derived
``shard = row_id % 2``: 2 rows per composite key, stored as a struct).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from airflow_ckpt_provider.spark.paths import arrow_filesystem, arrow_path, file_key

FILES = 8
ROWS_PER_FILE = 50
ROUND_1_FILES = 6
ROUND_1_KEYS = 75
ROUND_2_KEYS = 25

#: (row_id, key as the job writes it, value2)
OutputRow = tuple[int, str, float]


def make_inputs(directory: Path) -> list[str]:
    """Write the 8 input files (idempotent) and return their paths in order."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(FILES):
        path = directory / f"in-{f:02d}.parquet"
        paths.append(str(path))
        if path.exists():
            continue
        ids = list(range(f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE))
        if f < ROUND_1_FILES:
            keys = [f" k{r % ROUND_1_KEYS:03d}" for r in ids]
        else:
            keys = [f" k{ROUND_1_KEYS + r % ROUND_2_KEYS:03d}" for r in ids]
        values = [float(r % 97) / 4.0 for r in ids]
        table = pa.table({"row_id": pa.array(ids, pa.int64()), "key": keys, "value": values})
        pq.write_table(table, path)
    return paths


def inputs_of_round(inputs: Sequence[str], round_number: int) -> list[str]:
    return list(inputs[:ROUND_1_FILES]) if round_number == 1 else list(inputs)


def expected_rows(inputs: Sequence[str]) -> list[OutputRow]:
    """What a run without faults writes for ``inputs`` (computed without Spark)."""
    rows: list[OutputRow] = []
    for path in inputs:
        table = pq.read_table(path)
        for row_id, key, value in zip(*(table.column(c).to_pylist() for c in ("row_id", "key", "value")), strict=True):
            rows.append((row_id, key.strip().upper(), value * 2.0))
    return sorted(rows)


#: The derived second column of the ``rows-composite`` key: ``row_id % SHARDS``.
SHARDS = 2


def expected_keys(inputs: Sequence[str], mode: str) -> set[Any]:
    """The input keys a complete run checkpoints: file URIs (``files``), raw key values (``rows``),
    row ids (``rows-unique``) or ``(key, shard)`` tuples (``rows-composite``)."""
    return set(key_of_row(inputs, mode).values())


def key_of_row(inputs: Sequence[str], mode: str) -> dict[int, Any]:
    """Each input row's key (its file, its key, itself, or its key and shard), by row id."""
    keys: dict[int, Any] = {}
    for path in inputs:
        table = pq.read_table(path, columns=["row_id", "key"])
        for row_id, key in zip(table.column(0).to_pylist(), table.column(1).to_pylist(), strict=True):
            if mode == "files":
                keys[row_id] = file_key(path)
            elif mode == "rows-unique":
                keys[row_id] = row_id
            elif mode == "rows-composite":
                keys[row_id] = (key, row_id % SHARDS)
            else:
                keys[row_id] = key
    return keys


def done_key_values(table: pa.Table) -> list[Any]:
    """The done keys of ``get_checkpointed_keys()`` as :func:`key_of_row` spells them (a composite key's
    struct becomes a tuple of its fields in order)."""
    values = table.column(0).to_pylist()
    return [tuple(v.values()) if isinstance(v, dict) else v for v in values]


@dataclass(frozen=True)
class OutputLocation:
    """An output directory (local or S3) and the options that reach it."""

    uri: str
    options: Mapping[str, Any]

    def _fs(self) -> pafs.FileSystem:
        return arrow_filesystem(self.uri, self.options)

    def files(self) -> set[str]:
        """Every file under the output root, as the writers spell them (``file:///…``, ``s3://…``)."""
        selector = pafs.FileSelector(arrow_path(self.uri), recursive=True, allow_not_found=True)
        prefix = "s3://" if self.uri.startswith("s3://") else "file://"
        return {prefix + info.path for info in self._fs().get_file_info(selector) if info.type == pafs.FileType.File}

    def read_rows(self, files: Sequence[str] | None = None) -> list[OutputRow]:
        """Rows of ``files`` (default: every file under the root) read by a plain Parquet reader."""
        names = sorted(self.files() if files is None else files)
        if not names:
            return []
        dataset = ds.dataset([arrow_path(n) for n in names], filesystem=self._fs(), format="parquet")
        table = dataset.to_table(columns=["row_id", "key", "value2"])
        return sorted(zip(*(table.column(c).to_pylist() for c in ("row_id", "key", "value2")), strict=True))


def exactly_once_violations(got: Sequence[OutputRow], expected: Sequence[OutputRow]) -> list[str]:
    """What is wrong with ``got`` against ``expected`` (empty list: every row exactly once)."""
    problems: list[str] = []
    counts = Counter(r[0] for r in got)
    duplicated = sorted(i for i, c in counts.items() if c > 1)
    missing = sorted({r[0] for r in expected} - set(counts))
    extra = sorted(set(counts) - {r[0] for r in expected})
    if duplicated:
        problems.append(f"{len(duplicated)} rows more than once in the output, e.g. row_id {duplicated[:5]}")
    if missing:
        problems.append(f"{len(missing)} rows missing from the output, e.g. row_id {missing[:5]}")
    if extra:
        problems.append(f"{len(extra)} rows in the output that are not input, e.g. row_id {extra[:5]}")
    if not problems and sorted(got) != sorted(expected):
        problems.append("the output rows hold wrong values (key or value2 differ from the reference)")
    return problems
