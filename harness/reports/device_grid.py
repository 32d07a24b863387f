"""The multi-device view: rows backend x (causal, sink, window), columns device / vLLM version.

One grid per lane. A grid entry aggregates every cell of that row and column (the
other axes: dtype, KV-cache dtype, loader, CUDA graphs, ...), so the grid stays the
size of the matrix's shape however many cells ran: a 100k-cell merge still gives a
grid a person can read. The worst verdict colours the entry; the counts and distinct
reasons come with it. A simulated or real compute capability axis is a column, not a
row: it is the GPU generation, which is what columns are for.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from harness.reports.inputs import Run
from harness.verdict import Outcome, Verdict

if TYPE_CHECKING:
    from harness.reports.merge import MergedReport, Row

ROW_AXES = ("backend", "causal", "sink", "sliding_window")
COLUMN_AXIS = "capability"

SYMBOLS = {
    Verdict.PASS: "✅",
    Verdict.SUBSTITUTED: "🔀",
    Verdict.UNAVAILABLE: "\u2796",  # heavy minus
    Verdict.UNSUPPORTED: "⛔",
    Verdict.WRONG_BACKEND: "🚫",
    Verdict.MISMATCH: "❌",
    Verdict.TIMEOUT: "⏱️",
    Verdict.CRASH: "💥",
}
MISSED = "❗"  # the verdict is not the expected one
CLAIM_GAP = "◆"  # the backend's claim disagrees with what was observed
CONFLICT = "⚡"  # inputs disagreed about a cell

# Best to worst; the order the reports list verdicts in.
VERDICT_ORDER: tuple[Verdict, ...] = (
    Verdict.PASS,
    Verdict.SUBSTITUTED,
    Verdict.UNAVAILABLE,
    Verdict.UNSUPPORTED,
    Verdict.WRONG_BACKEND,
    Verdict.MISMATCH,
    Verdict.TIMEOUT,
    Verdict.CRASH,
)


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

    rows: list[Row] = field(default_factory=list)

    def counts(self) -> dict[Verdict, int]:
        counts: dict[Verdict, int] = {}
        for row in self.rows:
            counts[row.cell.verdict] = counts.get(row.cell.verdict, 0) + 1
        return counts

    @property
    def worst(self) -> Verdict:
        return max((row.cell.verdict for row in self.rows), key=VERDICT_ORDER.index)

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
        ordered = sorted(counts.items(), key=lambda item: -VERDICT_ORDER.index(item[0]))
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


def row_key(row: Row) -> RowKey:
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


def build_grids(report: MergedReport) -> list[Grid]:
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


# ---- Markdown ---------------------------------------------------------------------------

_MD_SPECIAL = str.maketrans({c: "\\" + c for c in "\\`*_[]|#~"})
MAX_MESSAGE = 300
MAX_LISTED = 100
MAX_REASONS = 400


def md_text(value: object, limit: int = MAX_MESSAGE) -> str:
    """Text from test output made inert in GitHub Markdown: no HTML, no tables broken, one line."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return html.escape(text.translate(_MD_SPECIAL), quote=False)


def render_markdown(report: MergedReport, grids: Sequence[Grid] | None = None) -> str:
    lines = ["# DFlash attention-backend compatibility (merged)", ""]
    summary = report.summary()
    lines.append(
        f"{summary['cells']} cells from {summary['runs']} runs; "
        + ", ".join(f"{v.value} {summary['verdicts'][v.value]}" for v in _verdicts(summary))
        + f"; {summary['outcomes'].get('match', 0)} as expected, "
        f"{summary['cells'] - summary['outcomes'].get('match', 0)} not"
        + (f"; {summary['conflicts']} conflicting duplicates" if summary["conflicts"] else "")
        + (f"; {summary['not_run']} planned but not run" if summary["not_run"] else "")
    )
    lines += ["", "## Runs", "", "| lane | device | platform | vLLM | torch | started | cells |"]
    lines.append("|---|---|---|---|---|---|---|")
    counts: dict[str, int] = {}
    for row in report.rows:
        counts[row.run] = counts.get(row.run, 0) + 1
    for run in report.runs:
        started = run.meta.get("started_at") or ""
        lines.append(
            "| "
            + " | ".join(
                md_text(v) for v in (run.lane, run.device, run.platform, run.vllm_version, run.torch_version, started)
            )
            + f" | {_cell_count(report, run, counts)} |"
        )
    lines += [
        "",
        f"Legend: {' '.join(f'{s} {v.value}' for v, s in SYMBOLS.items())}; "
        f"{MISSED} not the expected verdict; {CLAIM_GAP} claim disagrees with observation; "
        f"{CONFLICT} inputs disagreed. [n] points to a reason below.",
    ]
    reasons: dict[str, int] = {}
    for grid in build_grids(report) if grids is None else grids:
        lines += ["", f"## Lane {md_text(grid.lane)}", ""]
        labels = " | ".join(md_text(c.label) for c in grid.columns)
        lines.append(f"| backend | causal | sink | window | {labels} |")
        lines.append("|---|---|---|---|" + "---|" * len(grid.columns))
        for key in grid.rows:
            cells = [md_text(part) for part in row_label(key)]
            for column in grid.columns:
                entry = grid.entry(key, column)
                cells.append(_md_entry(entry, reasons) if entry else "")
            lines.append("| " + " | ".join(cells) + " |")
    if reasons:
        lines += ["", "### Reasons", ""]
        shown = list(reasons.items())[:MAX_REASONS]
        lines += [f"{number}. {text}" for text, number in shown]
        if len(reasons) > MAX_REASONS:
            lines.append(f"\n… {len(reasons) - MAX_REASONS} more reasons: see matrix.html or matrix.json")
    lines += _md_attention(report)
    return "\n".join(lines) + "\n"


def _cell_count(report: MergedReport, run: Run, counts: dict[str, int]) -> str:
    if run.key in report.junit_only:
        # Only a JUnit file told of this run: its testcases are in junit.xml, not in the grid.
        return f"JUnit only: {report.junit_only[run.key]} testcases"
    return str(counts.get(run.key, 0))


def _verdicts(summary: dict[str, Any]) -> list[Verdict]:
    return [v for v in VERDICT_ORDER if summary["verdicts"].get(v.value)]


def _md_entry(entry: Entry, reasons: dict[str, int]) -> str:
    marks = SYMBOLS[entry.worst] + " " + md_text(entry.summary())
    if entry.missed:
        marks += f" {MISSED}{entry.missed}"
    if entry.claim_gaps:
        marks += f" {CLAIM_GAP}{entry.claim_gaps}"
    if entry.conflicts:
        marks += f" {CONFLICT}{entry.conflicts}"
    if entry.worst == Verdict.PASS and not entry.missed and not entry.claim_gaps:
        return marks
    shown, hidden = entry.reasons(3)
    refs = []
    for text, _count in shown:
        refs.append(str(reasons.setdefault(md_text(text), len(reasons) + 1)))
    return marks + " [" + ", ".join(refs) + ("+" if hidden else "") + "]"


def _md_attention(report: MergedReport) -> list[str]:
    lines: list[str] = []
    missed = [row for row in report.rows if row.cell.outcome != Outcome.MATCH]
    if missed:
        lines += ["", f"## Not as expected ({len(missed)})", ""]
        lines += ["| run | cell | verdict | expected | stage | message |", "|---|---|---|---|---|---|"]
        for row in missed[:MAX_LISTED]:
            cell = row.cell
            lines.append(
                f"| {md_text(row.run)} | {md_text(cell.id)} | {cell.verdict.value} | {cell.expected.value} "
                f"| {cell.stage.value if cell.stage else ''} | {md_text(cell.message)} |"
            )
        lines += _more(len(missed))
    if report.conflicts or report.junit_conflicts:
        lines += ["", "## Conflicting duplicates (the worse result is kept)", ""]
        items: list[str] = [
            f"- {md_text(c.run)} {md_text(c.cell_id)}: {', '.join(c.verdicts)} (kept {c.kept}) from "
            + ", ".join(md_text(s) for s in c.sources)
            for c in report.conflicts
        ]
        items += [
            f"- JUnit {md_text(c.run)} {md_text(c.name)}: {', '.join(c.statuses)} (kept {c.kept}) from "
            + ", ".join(md_text(s) for s in c.sources)
            for c in report.junit_conflicts
        ]
        lines += items[:MAX_LISTED] + _more(len(items))
    gaps = [row for row in report.rows if row.cell.claim_gap is not None]
    if gaps:
        lines += ["", f"## Claims vs observed ({len(gaps)})", ""]
        lines += [
            f"- {md_text(row.run)} {md_text(row.cell.id)}: {row.cell.claim_gap.value if row.cell.claim_gap else ''}"
            f" — claims {'support' if row.cell.claim and row.cell.claim.supported else 'no support'}"
            f"{_claim_reasons(row)}, observed {row.cell.verdict.value}"
            for row in gaps[:MAX_LISTED]
        ]
        lines += _more(len(gaps))
    if report.not_run:
        lines += ["", f"## Planned but not run ({len(report.not_run)})", ""]
        lines += [f"- {md_text(run)} {md_text(ident)}" for run, ident in report.not_run[:MAX_LISTED]]
        lines += _more(len(report.not_run))
    if report.stale_expectations:
        lines += ["", "## Stale expectations (rules that matched no cell)", ""]
        lines += [f"- {md_text(item)}" for item in report.stale_expectations[:MAX_LISTED]]
    return lines


def _claim_reasons(row: Row) -> str:
    claim = row.cell.claim
    return f" ({md_text('; '.join(claim.reasons))})" if claim and claim.reasons else ""


def _more(total: int) -> list[str]:
    return [f"\n… and {total - MAX_LISTED} more: see matrix.html or matrix.json"] if total > MAX_LISTED else []
