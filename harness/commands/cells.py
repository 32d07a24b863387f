"""List a matrix's cells with the verdict each is expected to get, and any stale expectation rules.

Plain text by default, one cell per line: id, expected verdict, the reason (and the
message the verdict must carry, when the rule asks for one). --json prints the same as
an object. Stale rules (rules that decide no cell) are listed after the cells. Versioned
rules are chosen for --vllm (default: the vLLM installed here, if any).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from harness.bundled import matrix_path
from harness.errors import InputError
from harness.expectations import describe_release, describe_stale, expectations_for
from harness.matrix import expand, load_matrix
from harness.releases.provenance import installed_vllm
from harness.tomlfile import parse_release


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", metavar="MATRIX", help="matrix file (matrices/*.toml)")
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of text")
    parser.add_argument("--vllm", metavar="VERSION", help="judge as a run of this vLLM release (default: installed)")


def run(args: argparse.Namespace) -> int:
    release = args.vllm or installed_vllm()
    if args.vllm:
        try:
            parse_release(args.vllm)
        except ValueError as exc:
            raise InputError("--vllm", "", str(exc)) from None
    matrix = load_matrix(matrix_path(args.matrix))
    expectations = expectations_for(matrix, release)
    note = describe_release(expectations)
    cells = expand(matrix)
    stale = describe_stale(expectations, cells)
    rows: list[dict[str, Any]] = []
    for cell in cells:
        expectation = expectations.for_cell(cell)
        rows.append(
            {
                "id": cell.id,
                "axes": cell.values,
                "expected": expectation.verdict.value,
                "reason": expectation.describe(),
                "message": expectation.message,
                "finding": expectation.finding.id if expectation.finding else None,
                "correct": expectation.correct.verdict.value if expectation.correct else None,
                "tolerance": cell.tolerance,
                "timeout_s": cell.timeout_s,
            }
        )
    if args.json:
        document = {
            "matrix": matrix.name,
            "lane": matrix.lane,
            "vllm": release,
            "release_note": note,
            "cells": rows,
            "stale_expectations": stale,
        }
        print(json.dumps(document, indent=2))
        return 0
    width = max((len(row["id"]) for row in rows), default=0)
    verdict_width = max((len(row["expected"]) for row in rows), default=0)
    judged = f", judged as vLLM {release}" if release else ""
    print(f"# {matrix.name} ({matrix.lane} lane): {len(rows)} cells{judged}")
    if note:
        print(f"# {note}")
    for row in rows:
        must = f" [message contains {row['message']!r}]" if row["message"] else ""
        found = f" [finding {row['finding']}; without it: {row['correct']}]" if row["finding"] else ""
        print(f"{row['id']:<{width}}  {row['expected']:<{verdict_width}}  {row['reason']}{must}{found}")
    if stale:
        print(f"# {len(stale)} stale expectation rule(s):")
        for line in stale:
            print(f"stale: {line}")
    return 0
