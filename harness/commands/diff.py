"""Compare two reports (each a matrix.json or a report directory): new failures, fixes, verdict changes.

Prints the comparison as Markdown (pipe it to $GITHUB_STEP_SUMMARY to show it on the
run page); --md and --json write it to files too. Runs are
paired by lane, platform and device, so last night's report on vLLM 0.32 and
tonight's on 0.33 compare the same machine (by full key, versions included, when a
report holds several runs of one machine). Cells that appeared or disappeared are
listed.

Exit status: 1 when something regressed (a cell that matched its expectation before
and does not now, one that is now planned but not run, a verdict that got worse, or a
BASELINE cell missing from CURRENT, as when CURRENT is empty or another lane's; with
--allow-missing a missing cell is listed only, after a matrix edit that dropped cells),
0 otherwise, 2 on bad input (also --md or --json naming an input report: nothing is read).

--exact compares every field of every cell instead, apart from durations and timestamps
(harness/reports/exact.py): the check that a change of the harness moved nothing. It exits
1 on any difference, including a cell present on one side only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from harness.atomic import refuse_overlap, report_paths, write_outputs
from harness.reports.diff import diff_reports, load_report, render_diff_markdown
from harness.reports.exact import compare_exact, render_exact_markdown
from harness.reports.json_text import report_json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("baseline", metavar="BASELINE", help="matrix.json or report directory to compare against")
    parser.add_argument("current", metavar="CURRENT", help="matrix.json or report directory to check")
    parser.add_argument("--md", metavar="PATH", help="also write the Markdown comparison here")
    parser.add_argument("--json", metavar="PATH", help="write the comparison as JSON here")
    parser.add_argument(
        "--allow-missing",
        action="store_true",
        help="a BASELINE cell missing from CURRENT is listed, not a regression (after a matrix edit dropped cells)",
    )
    parser.add_argument(
        "--missing-baseline-ok",
        action="store_true",
        help="a BASELINE that does not exist is no comparison (say so, exit 0), as before a first baseline",
    )
    parser.add_argument(
        "--exact",
        action="store_true",
        help="compare every cell field except durations and timestamps; exit 1 on any difference",
    )


def run(args: argparse.Namespace) -> int:
    if args.missing_baseline_ok and not Path(args.baseline).exists():
        print(f"No baseline at {args.baseline}: nothing to diff against.")
        return 0
    named = [(f"--{name}", Path(getattr(args, name))) for name in ("md", "json") if getattr(args, name)]
    refuse_overlap(named, [*report_paths(Path(args.baseline)), *report_paths(Path(args.current))])
    baseline, current = load_report(args.baseline), load_report(args.current)
    if args.exact:
        comparison = compare_exact(baseline, current, baseline_name=str(args.baseline), current_name=str(args.current))
        _write(args, render_exact_markdown(comparison), comparison.to_json(), ("differences",))
        return 1 if comparison.differ else 0
    diff = diff_reports(
        baseline,
        current,
        baseline_name=str(args.baseline),
        current_name=str(args.current),
        allow_missing=args.allow_missing,
    )
    _write(args, render_diff_markdown(diff), diff.to_json(), ("changes",))
    return 1 if diff.regressed else 0


def _write(args: argparse.Namespace, markdown: str, data: dict[str, Any], lists: tuple[str, ...]) -> None:
    outputs = {}
    if args.md:
        outputs[Path(args.md)] = markdown.encode("utf-8")
    if args.json:
        outputs[Path(args.json)] = report_json(data, lists).encode("utf-8")
    write_outputs(outputs)
    sys.stdout.write(markdown)
