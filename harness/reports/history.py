"""The release-history view: one row per cell, one column per vLLM release, each change marked.

Built from a merged ``Report`` whose runs are one lane on one machine under several vLLM
releases (``dflash-matrix history`` runs them). Runs are grouped by their slot (lane,
platform, device) and ordered by release (PEP 440), so a merge of any runs gives one history
per slot. A cell *changed* in a release when its verdict differs from the one it had in the
nearest earlier release that ran it; a change of message alone (same verdict, other reason)
is marked apart, since a message may carry a release's own wording. A release that did not
run a cell shows it as not run and is stepped over, never read as a change; so is a cell that gave
no verdict in a release (an environment failure: it crashed importing vLLM, its lane did not
start), which the caller names with its reason (``dflash-matrix history`` decides which).
Each change says the finding (harness/findings.py) it starts or ends, from the findings the
cells' records carry; ``finding_releases`` reads, per finding, the releases that show it (its first
bad and last good release, and its cells per release: ``dflash-matrix findings --history``).

Pure: no I/O, no vLLM. Renders Markdown (history.md) and JSON (history.json).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packaging.version import InvalidVersion, Version

from harness.findings import Finding, finding_change
from harness.reports.device_grid import SYMBOLS
from harness.reports.model import FindingReleases, Report, Run
from harness.reports.text import MAX_LISTED, md
from harness.result import CellResult
from harness.verdict import VERDICT_ORDER, Verdict

CHANGED = "▶"  # the verdict differs from the previous release's
REWORDED = "≈"  # same verdict, another message
NOT_RUN = "·"
NO_VERDICT = "⊘"  # ran, but gave no verdict: an environment failure, not vLLM's answer


@dataclass(frozen=True)
class Step:
    """One cell in one release."""

    release: str
    verdict: Verdict | None  # None: this release did not run the cell
    message: str = ""
    changed: bool = False  # the verdict differs from the previous release that ran the cell
    reworded: bool = False  # same verdict as that release, another message
    no_verdict: str = ""  # why what it recorded is no verdict (an environment failure); stepped over
    finding: str | None = None  # the id of the finding the release's expectations record for the cell


@dataclass(frozen=True)
class CellHistory:
    cell: str
    steps: tuple[Step, ...]

    @property
    def changed_in(self) -> tuple[str, ...]:
        return tuple(step.release for step in self.steps if step.changed)

    @property
    def reworded_in(self) -> tuple[str, ...]:
        return tuple(step.release for step in self.steps if step.reworded)

    @property
    def no_verdict_in(self) -> tuple[str, ...]:
        return tuple(step.release for step in self.steps if step.no_verdict)


@dataclass(frozen=True)
class SlotHistory:
    """One lane on one machine across releases."""

    slot: str
    releases: tuple[str, ...]  # column labels, oldest first
    runs: tuple[Run, ...]  # the run behind each column
    cells: tuple[CellHistory, ...]  # in the oldest run's plan order, then cells first seen later

    @property
    def changed(self) -> tuple[CellHistory, ...]:
        return tuple(cell for cell in self.cells if cell.changed_in)

    def changes_per_release(self) -> dict[str, int]:
        counts = dict.fromkeys(self.releases[1:], 0)
        for cell in self.cells:
            for release in cell.changed_in:
                counts[release] += 1
        return counts


def _release_order(run: Run) -> tuple[int, Version | str, str]:
    try:
        return (0, Version(run.vllm_version), run.torch_version)
    except InvalidVersion:  # a dev build or "unknown": after the releases, by name
        return (1, run.vllm_version, run.torch_version)


def _labels(runs: Sequence[Run]) -> tuple[str, ...]:
    """The vLLM version, with the torch build where one version ran under two."""
    versions = [run.vllm_version for run in runs]
    return tuple(
        f"{run.vllm_version} (torch {run.torch_version})" if versions.count(run.vllm_version) > 1 else run.vllm_version
        for run in runs
    )


def release_history(report: Report, no_verdict: Mapping[tuple[str, str], str] | None = None) -> tuple[SlotHistory, ...]:
    """``no_verdict``: (run key, cell id) -> why that cell's record is no verdict of its release."""
    no_verdict = no_verdict or {}
    slots: dict[str, list[Run]] = {}
    for run in report.runs:
        if run.key not in report.junit_only:
            slots.setdefault(run.slot, []).append(run)
    histories = []
    for slot, runs in slots.items():
        ordered = sorted(runs, key=_release_order)
        labels = _labels(ordered)
        by_run = [{row.cell.id: row.cell for row in report.rows_of(run.key)} for run in ordered]
        order = list(dict.fromkeys(ident for cells in by_run for ident in cells))
        cells = []
        for ident in order:
            steps = []
            last: tuple[Verdict, str] | None = None
            for run, label, cells_of_run in zip(ordered, labels, by_run, strict=True):
                found = cells_of_run.get(ident)
                if found is None:
                    steps.append(Step(label, None))
                    continue
                why = no_verdict.get((run.key, ident))
                if why is not None:
                    steps.append(Step(label, found.verdict, found.message, no_verdict=why))
                    continue
                now = (found.verdict, found.message)
                changed = last is not None and now[0] != last[0]
                reworded = last is not None and not changed and now[1] != last[1]
                finding = found.finding.id if found.finding else None
                steps.append(Step(label, found.verdict, found.message, changed, reworded, finding=finding))
                last = now
            cells.append(CellHistory(ident, tuple(steps)))
        histories.append(SlotHistory(slot, labels, tuple(ordered), tuple(cells)))
    return tuple(histories)


def _shows(record: CellResult, signatures: set[tuple[Verdict, str | None]]) -> bool:
    return any(
        record.verdict == verdict and (not message or message in record.message) for verdict, message in signatures
    )


def _count(
    finding: Finding, signatures: Mapping[str, set[tuple[Verdict, str | None]]], records: Mapping[str, CellResult]
) -> tuple[int, int, int]:
    """In one release: the finding's cells that show it, that get what they would without it, that gave a verdict."""
    showing = without = ran = 0
    for cell, seen in signatures.items():
        record = records.get(cell)
        if record is None:
            continue
        ran += 1
        if _shows(record, seen):
            showing += 1
        elif record.verdict != Verdict.UNAVAILABLE:  # a cell the release cannot ask says nothing either way
            correct = record.correct.verdict if record.correct is not None else record.expected
            without += record.verdict in finding.correct_verdicts(correct)
    return showing, without, ran


def finding_releases(
    report: Report, no_verdict: Mapping[tuple[str, str], str] | None = None
) -> dict[tuple[str, str], FindingReleases]:
    """(slot, finding id) -> the finding across the releases of that slot's history (``release_history``'s
    runs and ``no_verdict``: a cell that gave no verdict in a release counts in none of its figures).

    A cell shows its finding in a release when it gets the verdict (and message) its expectation records
    under the finding in some release where it showed it as recorded; it gets what it would without it when
    its verdict is the finding's correct one (``Finding.correct_verdicts`` of the rule it falls to without
    the finding: its ``correct`` under the finding, its ``expected`` outside the finding's range)."""
    found: dict[tuple[str, str], FindingReleases] = {}
    for history in release_history(report, no_verdict):
        records = [{row.cell.id: row.cell for row in report.rows_of(run.key)} for run in history.runs]
        skipped = {
            (index, cell.cell) for cell in history.cells for index, step in enumerate(cell.steps) if step.no_verdict
        }
        findings: dict[str, Finding] = {}
        signatures: dict[str, dict[str, set[tuple[Verdict, str | None]]]] = {}
        for cells in records:
            for record in cells.values():
                if record.finding is None:
                    continue
                findings.setdefault(record.finding.id, record.finding)
                seen = signatures.setdefault(record.finding.id, {}).setdefault(record.id, set())
                if record.ok:
                    seen.add((record.expected, record.expected_message))
        for ident, finding in findings.items():
            counts = [
                _count(
                    finding,
                    signatures[ident],
                    {cell: record for cell, record in cells.items() if (index, cell) not in skipped},
                )
                for index, cells in enumerate(records)
            ]
            showing, without, ran = (tuple(column) for column in zip(*counts, strict=True))
            found[history.slot, ident] = FindingReleases(ident, history.slot, history.releases, showing, without, ran)
    return found


def history_json(histories: Sequence[SlotHistory], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        **(extra or {}),
        "slots": [
            {
                "slot": history.slot,
                "releases": list(history.releases),
                "runs": [run.key for run in history.runs],
                "changes_per_release": history.changes_per_release(),
                "cells": [
                    {
                        "id": cell.cell,
                        "changed_in": list(cell.changed_in),
                        "reworded_in": list(cell.reworded_in),
                        "no_verdict_in": list(cell.no_verdict_in),
                        "verdicts": [
                            step.verdict.value if step.verdict and not step.no_verdict else None for step in cell.steps
                        ],
                        "messages": [step.message for step in cell.steps],
                        "findings": [step.finding for step in cell.steps],
                    }
                    for cell in history.cells
                ],
            }
            for history in histories
        ],
    }


def _entry(step: Step) -> str:
    if step.verdict is None:
        return NOT_RUN
    if step.no_verdict:
        return f"{NO_VERDICT} no verdict"
    text = f"{SYMBOLS[step.verdict]} {step.verdict.value}"
    if step.changed:
        return f"**{CHANGED} {text}**"
    return f"{REWORDED} {text}" if step.reworded else text


def _table(history: SlotHistory, cells: Sequence[CellHistory]) -> list[str]:
    header = ["cell", *history.releases, "changed in"]
    lines = ["| " + " | ".join(md(text) for text in header) + " |", "|" + "---|" * len(header)]
    for cell in cells:
        marks = ", ".join(cell.changed_in) or "-"
        row = [md(cell.cell), *(_entry(step) for step in cell.steps), md(marks)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def _said(step: Step) -> str:
    verdict = step.verdict.value if step.verdict else "not run"
    return f"{verdict} ({step.message})" if step.message else verdict


def _transitions(cells: Sequence[CellHistory]) -> list[str]:
    """Each change in words, with both messages: what a bisect line says, per change."""
    lines = []
    for cell in cells:
        ran = [step for step in cell.steps if step.verdict is not None and not step.no_verdict]
        for before, after in itertools.pairwise(ran):
            if after.changed:
                change = finding_change(before.finding, after.finding)
                lines.append(
                    f"- {md(cell.cell)}: in {md(after.release)}: {md(_said(before))} -> {md(_said(after))}"
                    + (f" ({md(change)})" if change else "")
                )
    if len(lines) > MAX_LISTED:
        lines = [*lines[:MAX_LISTED], f"- ... {len(lines) - MAX_LISTED} more changes in history.json"]
    return lines


def history_markdown(histories: Sequence[SlotHistory], notes: Sequence[str] = ()) -> str:
    lines = ["# Release history", ""]
    lines += [f"- {md(note)}" for note in notes]
    lines += [
        f"- {CHANGED} bold: the verdict changed in that release (against the previous release that ran the cell);"
        f" {REWORDED}: same verdict, another message; {NOT_RUN}: not run in that release;"
        f" {NO_VERDICT}: no verdict (an environment failure named above), never counted as a change.",
        "",
    ]
    for history in histories:
        changed = history.changed
        lines += [f"## {md(history.slot)}", ""]
        lines.append(
            f"{len(history.cells)} cells over {len(history.releases)} releases "
            f"({', '.join(history.releases)}); {len(changed)} changed verdict at least once."
        )
        lines.append("")
        per_release = history.changes_per_release()
        if per_release:
            lines += ["| release | " + " | ".join(per_release) + " |", "|" + "---|" * (len(per_release) + 1)]
            lines += ["| cells changed | " + " | ".join(str(n) for n in per_release.values()) + " |", ""]
        lines += [f"### Changed ({len(changed)})", ""]
        lines += [*_table(history, changed), ""] if changed else ["No cell changed verdict.", ""]
        if changed:
            lines += [*_transitions(changed), ""]
        steady = [cell for cell in history.cells if not cell.changed_in]
        lines += [f"### Unchanged ({len(steady)})", ""]
        if steady:
            counts = {verdict: 0 for verdict in VERDICT_ORDER}
            for cell in steady:
                first = next((s.verdict for s in cell.steps if s.verdict is not None and not s.no_verdict), None)
                if first is not None:  # a cell that gave a verdict in no release counts under none
                    counts[first] += 1
            lines.append("By verdict: " + ", ".join(f"{verdict.value} {n}" for verdict, n in counts.items() if n) + ".")
            lines += ["", *_table(history, steady), ""]
    return "\n".join(lines) + "\n"
