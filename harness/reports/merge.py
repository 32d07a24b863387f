"""Merging runs into one Report: one journal (a single run), or many shards, devices and versions.

A cell is identified by (run, cell id). The same cell on two devices or two vLLM
versions is two runs, so two rows: nothing ever overwrites across runs. Within one
run, a record seen twice with the same verdict collapses (a journal and the
matrix.json built from it, or a shard uploaded twice); a record seen twice with
different verdicts is a conflict: the worse verdict is kept and the conflict is
recorded on the row, never resolved silently.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from harness.journal import JournalContents
from harness.reports.inputs import Inputs
from harness.reports.junit_merge import merge_junit
from harness.reports.model import CellRun, Conflict, Report, Run, RunResults, results_from_journal
from harness.result import CellResult
from harness.verdict import Outcome, severity


@contextmanager
def collector_paused() -> Iterator[None]:
    """A merge builds some ten objects per cell, none in a cycle; the cyclic collector would
    rescan the growing heap again and again (at 100k cells a third of the load time:
    benchmarks/README.md, "Figures behind the code"). Everything is released together when
    the command ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _worse(cell: CellResult) -> tuple[int, int]:
    """Higher is worse: the verdict first, then whether it missed its expectation."""
    return severity(cell.verdict), 0 if cell.outcome == Outcome.MATCH else 1


def merge_results(results: Sequence[RunResults]) -> tuple[list[Run], list[CellRun], list[tuple[str, str]]]:
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
    rows: list[CellRun] = []
    for (key, ident), records in seen.items():
        kept = max(records, key=lambda record: _worse(record[0]))[0]
        conflict = None
        if len({(cell.verdict, cell.outcome) for cell, _ in records}) > 1:
            conflict = Conflict(
                run=key,
                cell_id=ident,
                verdicts=tuple(cell.verdict.value for cell, _ in records),
                sources=tuple(source for _, source in records),
                kept=kept.verdict.value,
            )
        rows.append(CellRun(key, kept, conflict))
    # A cell one shard planned but never finished counts as not run only if no other shard ran it.
    not_run = [
        (key, ident) for key, idents in planned_missing.items() for ident in idents if (key, ident) not in seen
    ]
    return list(runs.values()), rows, not_run


def merge(inputs: Inputs) -> Report:
    runs, rows, not_run = merge_results(inputs.results)
    junit_runs, junit_conflicts = merge_junit(inputs.junit)
    known = {run.key for run in runs}
    junit_only = {run.key: suite for run, suite in junit_runs if run.key not in known}
    runs.extend(run for run, _ in junit_runs if run.key not in known)
    stale: dict[str, dict[str, Any]] = {}
    finished: dict[str, bool] = {}
    for part in inputs.results:
        for item in part.stale_expectations:
            stale.setdefault(part.run.key, {}).setdefault(repr(item), item)
        # As when journals are read together: an end record of any writer of the run (a resumed
        # run's, another xdist worker's) ends it; cells a killed writer never reached stay not run.
        finished[part.run.key] = finished.get(part.run.key, False) or part.finished
    sources = [part.source for part in inputs.results] + [part.source for part in inputs.junit]
    ordered_runs = sorted(runs, key=lambda r: (r.lane, r.device, r.vllm_version, r.platform, r.torch_version))
    position = {run.key: index for index, run in enumerate(ordered_runs)}
    return Report(
        runs=tuple(ordered_runs),
        # Grouped by run (a stable sort keeps each run's plan order): merging a merge changes nothing.
        rows=tuple(sorted(rows, key=lambda row: position[row.run])),
        not_run=tuple(sorted(not_run, key=lambda item: position[item[0]])),
        stale={key: tuple(items.values()) for key, items in stale.items()},
        unfinished=frozenset(key for key, ended in finished.items() if not ended),
        conflicts=tuple(row.conflict for row in rows if row.conflict is not None),
        junit_conflicts=tuple(junit_conflicts),
        sources=tuple(dict.fromkeys(sources)),
        junit_only=junit_only,
    )


def report_from_journal(contents: JournalContents) -> Report:
    """A single run: the merge of its journal."""
    return merge(Inputs((results_from_journal(contents),), ()))
