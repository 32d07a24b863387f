"""Merge reports (JUnit .xml, matrix .json, journal .jsonl) from many shards, runners and versions into one.

Inputs are files or directories (searched recursively). The same cell from two devices
or two vLLM versions stays two rows. Within one run, a cell reported twice with the
same verdict counts once; with different verdicts the worse one is kept and the
conflict is listed (matrix.json "conflicts", matrix.md, matrix.html) and warned about.

Writes junit.xml, matrix.json (a "runs" list, cells tagged with their run key),
matrix.md (one grid per lane: backend x (causal, sink, window) rows, device / vLLM
columns) and matrix.html (self-contained, filterable). Appends matrix.md to
$GITHUB_STEP_SUMMARY when that is set.

Exit status: 0 when the reports were written, 2 on bad input (nothing is written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.reports.inputs import load_inputs
from harness.reports.merge import collector_paused, merge, render_merged, write_merged
from harness.reports.step_summary import append_step_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="JUnit .xml, matrix .json, journal .jsonl, or a directory of them"
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="directory for junit.xml, matrix.json, matrix.md, matrix.html"
    )


def run(args: argparse.Namespace) -> int:
    with collector_paused():
        report, junit = merge(load_inputs(args.inputs))
        files = render_merged(report, junit)
    written = write_merged(files, Path(args.out))
    append_step_summary(files["matrix.md"].decode("utf-8"))
    summary = report.summary()
    print(
        f"{summary['cells']} cells from {summary['runs']} runs ({len(report.sources)} inputs): "
        f"{summary['match']} as expected, {summary['mismatching']} not, {summary['not_run']} not run"
    )
    for path in written.values():
        print(f"wrote {path}")
    if summary["conflicts"]:
        print(
            f"warning: {summary['conflicts']} cells were reported with different results within one run;"
            " the worse is kept, see 'conflicts' in matrix.json",
            file=sys.stderr,
        )
    return 0
