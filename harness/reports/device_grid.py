"""The multi-device view: rows backend x (causal, sink, window), columns device / vLLM version.

One grid per lane. A grid entry aggregates every cell of that row and column (the
other axes: dtype, KV-cache dtype, loader, CUDA graphs, ...), so the grid stays the
size of the matrix's shape however many cells ran: a 100k-cell merge still gives a
grid a person can read. The worst verdict colours the entry; the counts and distinct
reasons come with it. A simulated or real compute capability axis is a column, not a
row: it is the GPU generation, which is what columns are for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.reports.model import CellRun, Report, Run
from harness.verdict import Outcome, Verdict, severity

ROW_AXES = ("backend", "causal", "sink", "sliding_window")
COLUMN_AXIS = "capability"

SYMBOLS = {
    Verdict.PASS: "✅",
    Verdict.SUBSTITUTED: "🔀",
    Verdict.UNAVAILABLE: "\u2796",  # heavy minus
    Verdict.UNSUPPORTED: "⛔",
    Verdict.WRONG_BACKEND: "🚫",
    Verdict.WRONG_SETTING: "\u26a0",  # warning sign: a layer carries a setting it did not ask for
    Verdict.MISMATCH: "❌",
    Verdict.LOADER_DIFF: "\u2260",  # not equal: V1's and V2's drafts disagree
    Verdict.TIMEOUT: "⏱️",
    Verdict.CRASH: "💥",
}
MISSED = "❗"  # the verdict is not the expected one
CLAIM_GAP = "◆"  # the backend's claim disagrees with what was observed
CONFLICT = "⚡"  # inputs disagreed about a cell


RowKey = tuple[str, Any, Any, Any]


@dataclass(frozen=True)
class Column:
    run: Run
    capability: str | None

    @property
    def key(self) -> str:
        return f"{self.run.key} / {self.capability}" if self.capability else self.run.key

    @property
    def label(self) -> str:
        return f"{self.run.label} · sm {self.capability}" if self.capability else self.run.label


@dataclass
class Entry:
    """Every cell of one grid row in one column."""

    rows: list[CellRun] = field(default_factory=list)

    def counts(self) -> dict[Verdict, int]:
        counts: dict[Verdict, int] = {}
        for row in self.rows:
            counts[row.cell.verdict] = counts.get(row.cell.verdict, 0) + 1
        return counts

    @property
    def worst(self) -> Verdict:
        return max((row.cell.verdict for row in self.rows), key=severity)

    @property
    def missed(self) -> int:
        return sum(1 for row in self.rows if row.cell.outcome != Outcome.MATCH)

    @property
    def claim_gaps(self) -> int:
        return sum(1 for row in self.rows if row.cell.claim_gap is not None)

    @property
    def conflicts(self) -> int:
        return sum(1 for row in self.rows if row.conflict)

    def summary(self) -> str:
        """E.g. ``pass`` or ``crash 1 · pass 3``, worst verdict first."""
        counts = self.counts()
        if len(counts) == 1:
            (verdict, count), *_ = counts.items()
            return verdict.value if count == 1 else f"{verdict.value} x{count}"
        ordered = sorted(counts.items(), key=lambda item: -severity(item[0]))
        return " · ".join(f"{verdict.value} {count}" for verdict, count in ordered)

    def reasons(self, limit: int) -> tuple[list[tuple[str, int]], int]:
        """Distinct 'verdict: message' lines, most frequent first, and how many were left out."""
        seen: dict[str, int] = {}
        for row in self.rows:
            cell = row.cell
            text = f"{cell.verdict.value}: {cell.message}" if cell.message else cell.verdict.value
            if cell.outcome != Outcome.MATCH:
                text += f" (expected {cell.expected.value}: {cell.expected_reason})"
            seen[text] = seen.get(text, 0) + 1
        ordered = sorted(seen.items(), key=lambda item: -item[1])
        return ordered[:limit], max(0, len(ordered) - limit)


@dataclass(frozen=True)
class Grid:
    lane: str
    columns: tuple[Column, ...]
    rows: tuple[RowKey, ...]
    entries: dict[tuple[RowKey, str], Entry]

    def entry(self, row: RowKey, column: Column) -> Entry | None:
        return self.entries.get((row, column.key))


def row_key(row: CellRun) -> RowKey:
    axes = row.cell.axes
    backend = str(axes.get("backend", row.cell.requested_backend or "auto"))
    return (backend, axes.get("causal"), axes.get("sink"), axes.get("sliding_window"))


def row_label(key: RowKey) -> tuple[str, str, str, str]:
    backend, causal, sink, window = key
    return (
        backend,
        "—" if causal is None else ("causal" if causal else "non-causal"),
        "—" if sink is None else ("sink" if sink else "no sink"),
        "—" if not window else str(window),
    )


def _sortable(key: RowKey) -> tuple[str, int, int, int]:
    backend, causal, sink, window = key
    return (backend, 0 if causal in (True, None) else 1, 1 if sink else 0, int(window or 0))


def build_grids(report: Report) -> list[Grid]:
    runs = report.run_by_key()
    order = {run.key: index for index, run in enumerate(report.runs)}
    by_lane: dict[str, dict[tuple[RowKey, str], Entry]] = {}
    columns: dict[str, dict[str, Column]] = {}
    for row in report.rows:
        run = runs[row.run]
        capability = row.cell.axes.get(COLUMN_AXIS)
        column = Column(run, str(capability) if capability is not None else None)
        columns.setdefault(run.lane, {}).setdefault(column.key, column)
        entries = by_lane.setdefault(run.lane, {})
        entries.setdefault((row_key(row), column.key), Entry()).rows.append(row)
    grids = []
    for lane in sorted(by_lane):
        lane_columns = sorted(
            columns[lane].values(), key=lambda c: (order[c.run.key], _capability_order(c.capability))
        )
        row_keys = sorted({key for key, _ in by_lane[lane]}, key=_sortable)
        grids.append(Grid(lane, tuple(lane_columns), tuple(row_keys), by_lane[lane]))
    return grids


def _capability_order(capability: str | None) -> tuple[int, int]:
    if capability is None:
        return (0, 0)
    major, _, minor = capability.partition(".")
    return (int(major), int(minor or 0)) if major.isdigit() and minor.isdigit() else (0, 0)
