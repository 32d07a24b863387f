"""Build junit.xml, matrix.json and matrix.md from journals (files, or directories of *.jsonl).

Works on a journal left by a killed run: the cells it holds are reported, the planned
cells it lacks are listed as not run. Nothing is written unless every journal reads
cleanly; each report replaces the previous one atomically.

Exit status: 0 when the reports were written (add --strict to exit 1 unless every
planned cell ran and got its expected verdict), 2 on bad input.
"""

from __future__ import annotations

import argparse

from harness.journal import read_journals
from harness.reports.build import write_reports
from harness.reports.matrix_json import summary
from harness.reports.model import run_report


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("journals", metavar="JOURNAL", nargs="+", help="journal file (*.jsonl) or directory of them")
    parser.add_argument("--out", metavar="DIR", required=True, help="directory for junit.xml, matrix.json, matrix.md")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 unless every planned cell ran and matched its expectation"
    )


def run(args: argparse.Namespace) -> int:
    contents = read_journals(args.journals)
    written = write_reports(contents, args.out)
    counts = summary(run_report(contents))
    print(
        f"{counts['cells']} cells: {counts['match']} as expected, {counts['mismatching']} not, "
        f"{counts['not_run']} not run, {counts['stale_expectations']} stale expectation rules"
    )
    for path in written.values():
        print(f"wrote {path}")
    return 1 if args.strict and not counts["ok"] else 0
