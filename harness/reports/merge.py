"""Merging many runs into one report: shards, xdist workers, one job per GPU, several vLLM versions.

A cell is identified by (run, cell id). The same cell on two devices or two vLLM
versions is two runs, so two rows: nothing ever overwrites across runs. Within one
run, a record seen twice with the same verdict collapses (a journal and the
matrix.json built from it, or a shard uploaded twice); a record seen twice with
different verdicts is a conflict: the worse verdict is kept and the conflict is
listed, never resolved silently.
"""

from __future__ import annotations

import gc
import io
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from junitparser import JUnitXml

from harness.atomic import write_all_atomic
from harness.errors import InputError
from harness.reports.device_grid import VERDICT_ORDER, build_grids, render_markdown
from harness.reports.inputs import SCHEMA, Inputs, Run, RunResults
from harness.reports.json_text import report_json
from harness.reports.junit_merge import JUnitConflict, merge_junit
from harness.result import CellResult
from harness.verdict import ClaimGap, Outcome


@dataclass(frozen=True)
class Conflict:
    """One cell of one run reported with different verdicts by different inputs."""

    run: str
    cell_id: str
    verdicts: tuple[str, ...]  # each input's verdict, in input order
    sources: tuple[str, ...]
    kept: str

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "id": self.cell_id,
            "verdicts": list(self.verdicts),
            "sources": list(self.sources),
            "kept": self.kept,
        }


@dataclass(frozen=True)
class Row:
    """A cell as it ran in one run."""

    run: str
    cell: CellResult
    conflict: bool = False


@dataclass(frozen=True)
class MergedReport:
    runs: tuple[Run, ...]
    rows: tuple[Row, ...]
    conflicts: tuple[Conflict, ...]
    junit_conflicts: tuple[JUnitConflict, ...]
    not_run: tuple[tuple[str, str], ...]  # (run key, cell id)
    stale_expectations: tuple[Any, ...]
    sources: tuple[str, ...]
    # Runs only JUnit files told of: their testcases are in junit.xml, but without cell
    # records (matrix.json or journal) the grid cannot place them. Key -> testcase count.
    junit_only: Mapping[str, int] = field(default_factory=dict)

    def run_by_key(self) -> dict[str, Run]:
        return {run.key: run for run in self.runs}

    def summary(self) -> dict[str, Any]:
        """The single-run summary's fields, summed, plus what only a merge has (runs, conflicts)."""
        return dict(self._summary)

    @cached_property
    def _summary(self) -> dict[str, Any]:
        # Counted once: every renderer shows it, and 100k cells make a recount noticeable.
        verdicts = Counter(row.cell.verdict for row in self.rows)
        outcomes = Counter(row.cell.outcome for row in self.rows)
        gaps = Counter(row.cell.claim_gap for row in self.rows)
        mismatching = len(self.rows) - outcomes[Outcome.MATCH]
        conflicts = len(self.conflicts) + len(self.junit_conflicts)
        return {
            "runs": len(self.runs),
            "cells": len(self.rows),
            "not_run": len(self.not_run),
            "match": outcomes[Outcome.MATCH],
            "mismatching": mismatching,
            "verdicts": {verdict.value: verdicts[verdict] for verdict in VERDICT_ORDER},
            "outcomes": {how.value: outcomes[how] for how in Outcome},
            "over_claims": gaps[ClaimGap.OVER_CLAIM],
            "under_claims": gaps[ClaimGap.UNDER_CLAIM],
            "stale_expectations": len(self.stale_expectations),
            "conflicts": conflicts,
            "junit_only_runs": sorted(self.junit_only),
            "ok": mismatching == 0 and not self.not_run and not self.stale_expectations and not conflicts,
        }

    def claim_gaps(self, gap: ClaimGap) -> list[Row]:
        return [row for row in self.rows if row.cell.claim_gap == gap]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "runs": [run.to_json() for run in self.runs],
            "summary": self.summary(),
            "cells": [{**row.cell.to_json(), "run": row.run, "conflict": row.conflict} for row in self.rows],
            "not_run": [{"run": run, "id": ident} for run, ident in self.not_run],
            "claims": {
                "over_claims": [_claim_json(row) for row in self.claim_gaps(ClaimGap.OVER_CLAIM)],
                "under_claims": [_claim_json(row) for row in self.claim_gaps(ClaimGap.UNDER_CLAIM)],
            },
            "conflicts": [c.to_json() for c in self.conflicts] + [c.to_json() for c in self.junit_conflicts],
            "stale_expectations": list(self.stale_expectations),
            "sources": list(self.sources),
        }


def _claim_json(row: Row) -> dict[str, Any]:
    cell = row.cell
    return {
        "run": row.run,
        "id": cell.id,
        "verdict": cell.verdict.value,
        "supported": cell.claim.supported if cell.claim else None,
        "reasons": list(cell.claim.reasons) if cell.claim else [],
        "message": cell.message,
    }


@contextmanager
def collector_paused() -> Iterator[None]:
    """A merge builds some ten objects per cell, none in a cycle; the cyclic collector would
    rescan the growing heap again and again (100k cells: loading took 5.3 s with it, 3.4 s
    without). Everything is released together when the command ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def severity(cell: CellResult) -> tuple[int, int]:
    """Higher is worse: the verdict first, then whether it missed its expectation."""
    return VERDICT_ORDER.index(cell.verdict), 0 if cell.outcome == Outcome.MATCH else 1


def merge_results(results: Sequence[RunResults]) -> tuple[list[Run], list[Row], list[Conflict], list[tuple[str, str]]]:
    runs: dict[str, Run] = {}
    seen: dict[tuple[str, str], list[tuple[CellResult, str]]] = {}
    planned_missing: dict[str, dict[str, None]] = {}
    for part in results:
        key = part.run.key
        runs.setdefault(key, part.run)
        for cell in part.cells:
            seen.setdefault((key, cell.id), []).append((cell, part.source))
        for ident in part.not_run:
            planned_missing.setdefault(key, {})[ident] = None
    rows: list[Row] = []
    conflicts: list[Conflict] = []
    for (key, ident), records in seen.items():
        kept = max(records, key=lambda record: severity(record[0]))[0]
        distinct = {(cell.verdict, cell.outcome) for cell, _ in records}
        if len(distinct) > 1:
            conflicts.append(
                Conflict(
                    run=key,
                    cell_id=ident,
                    verdicts=tuple(cell.verdict.value for cell, _ in records),
                    sources=tuple(source for _, source in records),
                    kept=kept.verdict.value,
                )
            )
        rows.append(Row(key, kept, conflict=len(distinct) > 1))
    # A cell one shard planned but never finished counts as not run only if no other shard ran it.
    not_run = [
        (key, ident) for key, idents in planned_missing.items() for ident in idents if (key, ident) not in seen
    ]
    return list(runs.values()), rows, conflicts, not_run


def merge(inputs: Inputs) -> tuple[MergedReport, JUnitXml]:
    runs, rows, conflicts, not_run = merge_results(inputs.results)
    junit, junit_runs, junit_conflicts = merge_junit(inputs.junit, rows, runs, not_run)
    known = {run.key for run in runs}
    junit_only = {run.key: count for run, count in junit_runs if run.key not in known}
    runs.extend(run for run, _ in junit_runs if run.key not in known)
    stale: dict[str, Any] = {}
    for part in inputs.results:
        for item in part.stale_expectations:
            stale.setdefault(repr(item), item)
    for run in runs:
        for item in run.meta.get("stale_expectations") or ():
            stale.setdefault(repr(item), item)
    sources = [part.source for part in inputs.results] + [part.source for part in inputs.junit]
    ordered_runs = sorted(runs, key=lambda r: (r.lane, r.device, r.vllm_version, r.platform, r.torch_version))
    position = {run.key: index for index, run in enumerate(ordered_runs)}
    report = MergedReport(
        runs=tuple(ordered_runs),
        # Grouped by run (a stable sort keeps each run's plan order): merging a merge changes nothing.
        rows=tuple(sorted(rows, key=lambda row: position[row.run])),
        conflicts=tuple(conflicts),
        junit_conflicts=tuple(junit_conflicts),
        not_run=tuple(sorted(not_run, key=lambda item: position[item[0]])),
        stale_expectations=tuple(stale.values()),
        sources=tuple(dict.fromkeys(sources)),
        junit_only=junit_only,
    )
    return report, junit


def render_merged(report: MergedReport, junit: JUnitXml) -> dict[str, bytes]:
    from harness.reports.html import render_html  # html.py renders a MergedReport: import it late

    xml = io.BytesIO()
    junit.write(xml)
    grids = build_grids(report)
    return {
        "junit.xml": xml.getvalue(),
        "matrix.json": report_json(report.to_json()).encode("utf-8"),
        "matrix.md": render_markdown(report, grids).encode("utf-8"),
        "matrix.html": render_html(report, grids).encode("utf-8"),
    }


def write_merged(files: Mapping[str, bytes], out: Path) -> dict[str, Path]:
    """Everything is rendered before the first byte is written: bad data leaves no half report."""
    if out.exists() and not out.is_dir():
        raise InputError(out, "", "output path exists and is not a directory")
    try:
        return write_all_atomic(out, files)
    except OSError as exc:
        raise InputError(out, "", f"cannot write reports: {exc.strerror or exc}") from None
