"""Benchmarks report only what a quiet machine measured.

A figure taken while a test suite, a second benchmark or any other heavy process shares
this machine's two cores says nothing about what a user sees: every fixed cost of ours
hides behind stretched task times (``bench/results/row_keys.txt`` once reported 1.00x at
a load average of 17). So every timing script starts with :func:`gate`:

* it samples the 1-minute load average and the number of runnable processes (state ``R``
  in ``/proc``, this process excluded) at its start, and again at its end (:meth:`Quiet.finish`);
* when the load at the start is above :data:`LOAD_LIMIT` it refuses to run (exit code 3,
  one line saying why), unless ``--allow-noisy`` is given: then it runs and every line it
  prints is marked ``[noisy]``, and the results it writes carry ``"noisy": true``.

Only the start decides: a benchmark that drives Spark on both cores raises the load
itself, so the end figure is printed beside the results, not judged. For the same reason a
benchmark started by another one (``bench/run_all.py`` runs several in a row, some as child
processes) takes its parent's verdict from :data:`PARENT_VERDICT` instead of judging a load
its parent made.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

#: Above this 1-minute load average at the start, a benchmark refuses to report (2 cores here);
#: ``CKPT_BENCH_LOAD_LIMIT`` overrides it (the tests of this gate use it to play a busy machine).
LOAD_LIMIT = float(os.environ.get("CKPT_BENCH_LOAD_LIMIT", "1.5"))
#: Exit code of a benchmark that refused to run on a busy machine.
EXIT_NOISY = 3
NOISY_MARK = "[noisy] "
#: Environment variable through which a gated benchmark hands its verdict to the benchmarks it starts.
PARENT_VERDICT = "CKPT_BENCH_VERDICT"


@dataclass(frozen=True)
class LoadSample:
    """The load averages (1/5/15 min) and the processes runnable at one moment."""

    load: tuple[float, float, float]
    busy: int

    def describe(self) -> str:
        one, five, fifteen = self.load
        return f"load average {one:.2f} / {five:.2f} / {fifteen:.2f}, {self.busy} other busy processes"

    def to_json(self) -> dict[str, Any]:
        return {"load": [round(x, 2) for x in self.load], "busy": self.busy}


def busy_processes(proc: Path = Path("/proc")) -> int:
    """Processes in state ``R`` (running or runnable), this one excluded."""
    count = 0
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # the process ended while we looked
            continue
        # The command name (field 2) is in parentheses and may hold spaces: the state follows the last ')'.
        state = text[text.rfind(")") + 2 : text.rfind(")") + 3]
        if state == "R" and stat.parent.name != str(os.getpid()):
            count += 1
    return count


def sample() -> LoadSample:
    one, five, fifteen = os.getloadavg()
    return LoadSample((one, five, fifteen), busy_processes())


class _MarkedLines:
    """A text stream that prefixes every line written through it with :data:`NOISY_MARK`."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner
        self._at_line_start = True

    def write(self, text: str) -> int:
        out = []
        for piece in text.splitlines(keepends=True):
            if self._at_line_start:
                out.append(NOISY_MARK)
            out.append(piece)
            self._at_line_start = piece.endswith("\n")
        self._inner.write("".join(out))
        return len(text)

    def flush(self) -> None:
        self._inner.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@dataclass
class Quiet:
    """What a benchmark run records about the machine it ran on."""

    start: LoadSample
    noisy: bool
    end: LoadSample | None = None

    def finish(self) -> LoadSample:
        """Sample the load at the end and print both samples."""
        self.end = sample()
        print(f"machine at start: {self.start.describe()}; at end: {self.end.describe()}", flush=True)
        return self.end

    def record(self) -> dict[str, Any]:
        """The samples for a results file (``finish`` first for the end sample)."""
        return {
            "start": self.start.to_json(),
            "end": None if self.end is None else self.end.to_json(),
            "limit": LOAD_LIMIT,
            "noisy": self.noisy,
        }


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-noisy",
        action="store_true",
        help=f"run even if the load average at the start is above {LOAD_LIMIT}; every printed line is marked noisy",
    )


def gate(args: argparse.Namespace, *, limit: float = LOAD_LIMIT) -> Quiet:
    """Refuse a busy machine (exit :data:`EXIT_NOISY`) unless ``args.allow_noisy``; then mark the output noisy."""
    start = sample()
    inherited = os.environ.get(PARENT_VERDICT)
    noisy = inherited == "noisy" if inherited in ("quiet", "noisy") else start.load[0] > limit
    if noisy and not inherited and not getattr(args, "allow_noisy", False):
        print(
            f"refusing to benchmark: {start.describe()} at the start, above {limit} on {os.cpu_count()} cores; "
            "stop the other work (test suites, benchmarks, helpers) and wait, or pass --allow-noisy "
            "to get figures marked noisy",
            file=sys.stderr,
        )
        raise SystemExit(EXIT_NOISY)
    os.environ[PARENT_VERDICT] = "noisy" if noisy else "quiet"
    judged = f"the verdict of the benchmark that started this one ({inherited})" if inherited else f"limit {limit}"
    if noisy:
        sys.stdout = _MarkedLines(sys.stdout)  # type: ignore[assignment]
        print(f"NOISY RUN: {start.describe()} at the start ({judged}); no figure below is evidence", flush=True)
    else:
        print(f"quiet machine: {start.describe()} at the start ({judged})", flush=True)
    return Quiet(start, noisy)
