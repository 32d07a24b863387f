"""Compare observed sink / non-causal support with vLLM's generated backend table (docs drift).

--table is a local copy of vLLM's docs/design/attention_backends.md (the version that
matches the vLLM under test). Reports are matrix.json files, journals, or report
directories. Only cells that isolate one feature at neutral values of the other axes
count as evidence (see the drift module's docstring); the table's rows are matched by
backend and compute capability.

Prints Markdown; --md and --json write it to files too.

Exit status: 1 when the table and the observations disagree (the docs, or the
backend, need fixing; a CI job may run this step with continue-on-error to report
without blocking), 0 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness.atomic import refuse_overlap, write_outputs
from harness.reports.backend_table import load_backend_table
from harness.reports.drift import check_drift, render_drift_markdown
from harness.reports.inputs import input_files, load_inputs
from harness.reports.json_text import report_json
from harness.reports.merge import merge_results


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--table", required=True, metavar="MD", help="a copy of vLLM's docs/design/attention_backends.md"
    )
    parser.add_argument(
        "reports", nargs="+", metavar="REPORT", help="matrix.json, journal .jsonl, or a report directory"
    )
    parser.add_argument("--md", metavar="PATH", help="also write the Markdown here")
    parser.add_argument("--json", metavar="PATH", help="write the findings as JSON here")


def run(args: argparse.Namespace) -> int:
    named = [(f"--{name}", Path(getattr(args, name))) for name in ("md", "json") if getattr(args, name)]
    refuse_overlap(named, [Path(args.table), *(Path(item) for item in args.reports), *input_files(args.reports)])
    table = load_backend_table(args.table)
    runs, rows, _ = merge_results(load_inputs(args.reports).results)
    report = check_drift(table, rows, {run.key: dict(run.meta) for run in runs})
    markdown = render_drift_markdown(report)
    outputs = {}
    if args.md:
        outputs[Path(args.md)] = markdown.encode("utf-8")
    if args.json:
        lists = ("disagreements", "ambiguous", "undocumented")
        outputs[Path(args.json)] = report_json(report.to_json(), lists).encode("utf-8")
    write_outputs(outputs)
    sys.stdout.write(markdown)
    return 1 if report.disagrees else 0
