"""Merge reports (JUnit .xml, matrix .json, journal .jsonl) from many shards, runners and versions into one.

Inputs are files or directories (searched recursively). The same cell from two devices
or two vLLM versions stays two rows. Within one run, a cell reported twice with the
same verdict counts once; with different verdicts the worse one is kept and the
conflict is listed (matrix.json "conflicts", matrix.md, matrix.html) and warned about.

Writes junit.xml (one testsuite per run, named after its lane, device and vLLM version; with
--junit-per-run also one junit-<suite>.xml per run), matrix.json (a "runs" list, cells tagged with their run key),
matrix.md (one grid per lane: backend x (causal, sink, window) rows, device / vLLM
columns) and matrix.html (self-contained, filterable). Appends matrix.md to
$GITHUB_STEP_SUMMARY when that is set.

Exit status: 0 when the reports were written, 2 on bad input (nothing is written): also an --out that
is an input, a full disk (the previous set stays whole), or another merge writing --out.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.atomic import locked, refuse_overlap, writable_folder
from harness.reports.build import render_reports, write_files
from harness.reports.inputs import input_files, load_inputs
from harness.reports.merge import collector_paused, merge
from harness.reports.step_summary import append_step_summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "inputs", nargs="+", metavar="INPUT", help="JUnit .xml, matrix .json, journal .jsonl, or a directory of them"
    )
    parser.add_argument(
        "--out", required=True, metavar="DIR", help="directory for junit.xml, matrix.json, matrix.md, matrix.html"
    )
    parser.add_argument(
        "--junit-per-run",
        action="store_true",
        help="also write junit-<suite name>.xml per run (for publishers that annotate by file)",
    )


def run(args: argparse.Namespace) -> int:
    out = writable_folder(Path(args.out), "--out")
    inputs = [Path(item) for item in args.inputs]
    inputs += input_files(inputs)
    refuse_overlap([("--out", out)], inputs)
    with collector_paused():
        report = merge(load_inputs(inputs))
        files = render_reports(report, junit_per_run=args.junit_per_run)
    refuse_overlap([("--out", out / name) for name in files], inputs)
    with locked(out, wait=False):
        written = write_files(files, out)
    append_step_summary(files["matrix.md"].decode("utf-8"))
    summary = report.summary()
    print(
        f"{summary['cells']} cells from {summary['runs']} runs ({len(report.sources)} inputs): "
        f"{summary['match']} as expected, {summary['mismatching']} not, {summary['not_run']} not run, "
        f"{summary['incomplete_runs']} incomplete runs"
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
