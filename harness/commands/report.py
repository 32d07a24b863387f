"""Build junit.xml, matrix.json, matrix.md and matrix.html from journals (files, or directories of *.jsonl).

Works on a journal left by a killed run: the cells it holds are reported, the planned
cells it lacks are listed as not run. Nothing is written unless every journal reads
cleanly; each report replaces the previous one atomically.

Exit status: 0 when the reports were written (add --strict to exit 1 unless the run
finished, every planned cell ran and got its expected verdict), 2 on bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.atomic import refuse_overlap, writable_folder
from harness.journal import read_journals
from harness.reports.build import render_reports, write_files
from harness.reports.merge import report_from_journal


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("journals", metavar="JOURNAL", nargs="+", help="journal file (*.jsonl) or directory of them")
    parser.add_argument(
        "--out", metavar="DIR", required=True, help="directory for junit.xml, matrix.json, matrix.md, matrix.html"
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 unless every planned cell ran and matched its expectation"
    )


def run(args: argparse.Namespace) -> int:
    out = writable_folder(Path(args.out), "--out")
    inputs = [Path(item) for item in args.journals]
    inputs += [path for item in inputs for path in ((*item.rglob("*.jsonl"),) if item.is_dir() else ())]
    refuse_overlap([("--out", out)], inputs)
    report = report_from_journal(read_journals(args.journals))
    files = render_reports(report)
    refuse_overlap([("--out", out / name) for name in files], inputs)
    written = write_files(files, out)
    counts = report.summary()
    print(
        f"{counts['cells']} cells: {counts['match']} as expected, {counts['mismatching']} not, "
        f"{counts['not_run']} not run, {counts['stale_expectations']} stale expectation rules"
    )
    for path in written.values():
        print(f"wrote {path}")
    return 1 if args.strict and not counts["ok"] else 0
