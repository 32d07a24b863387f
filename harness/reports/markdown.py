"""matrix.md: the compatibility matrix for people and GitHub step summaries, one run or many.

The runs table (each run's device, versions, and whether it finished), then one grid per lane:
a row per backend x causal x sink x sliding window, a column per run (and compute capability).
Each grid entry aggregates the cells behind it (dtype, loader, ...), so a 100k-cell matrix stays
readable: symbol = worst verdict, text = count per verdict, then what needs a look. Then the
findings (known bugs) the cells show, cells not as expected, conflicts, claim gaps, cells not run
and stale rules. Messages come from
exceptions, so every piece of test output goes through ``md``: no table is broken and no markup
injected by a stray `|`, `<` or `*`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.reports.device_grid import CLAIM_GAP, CONFLICT, MISSED, SYMBOLS, Entry, Grid, build_grids, row_label
from harness.reports.model import CellRun, Report, Run
from harness.reports.text import MAX_LISTED, md
from harness.verdict import VERDICT_ORDER, Outcome, Verdict

MAX_REASONS = 400


def render_markdown(report: Report, grids: Sequence[Grid] | None = None) -> str:
    lines = ["# DFlash attention-backend compatibility", ""]
    summary = report.summary()
    lines.append(
        f"{summary['cells']} cells from {summary['runs']} run{'' if summary['runs'] == 1 else 's'}; "
        + ", ".join(f"{v.value} {summary['verdicts'][v.value]}" for v in _verdicts(summary))
        + f"; {summary['outcomes'].get('match', 0)} as expected, "
        f"{summary['cells'] - summary['outcomes'].get('match', 0)} not"
        + (f"; {summary['conflicts']} conflicting duplicates" if summary["conflicts"] else "")
        + (f"; {summary['not_run']} planned but not run" if summary["not_run"] else "")
        + (f"; {summary['host_limited']} at a host limit, no answer of vLLM's" if summary.get("host_limited") else "")
    )
    lines += ["", "## Runs", "", "| lane | device | platform | vLLM | torch | started | run | cells |"]
    lines.append("|---|---|---|---|---|---|---|---|")
    counts: dict[str, int] = {}
    for row in report.rows:
        counts[row.run] = counts.get(row.run, 0) + 1
    for run in report.runs:
        started = run.meta.get("started_at") or ""
        lines.append(
            "| "
            + " | ".join(
                md(v) for v in (run.lane, run.device, run.platform, run.vllm_version, run.torch_version, started)
            )
            + f" | {md(report.state(run.key))} | {_cell_count(report, run, counts)} |"
        )
    unfinished = [run for run in report.runs if report.incomplete(run.key)]
    if unfinished:
        lines += [
            "",
            f"**{len(unfinished)} run(s) did not complete** (killed, timed out, or cells not run): "
            + ", ".join(md(run.label) for run in unfinished)
            + ". Their grids are partial.",
        ]
    lines += [
        "",
        f"Legend: {' '.join(f'{s} {v.value}' for v, s in SYMBOLS.items())}; "
        f"{MISSED} not the expected verdict; {CLAIM_GAP} claim disagrees with observation; "
        f"{CONFLICT} inputs disagreed. [n] points to a reason below.",
    ]
    reasons: dict[str, int] = {}
    for grid in build_grids(report) if grids is None else grids:
        lines += ["", f"## Lane {md(grid.lane)}", ""]
        labels = " | ".join(md(c.label) for c in grid.columns)
        lines.append(f"| backend | causal | sink | window | {labels} |")
        lines.append("|---|---|---|---|" + "---|" * len(grid.columns))
        for key in grid.rows:
            cells = [md(part) for part in row_label(key)]
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
    lines += _md_differential(report)
    lines += _md_findings(report)
    lines += _md_attention(report)
    return "\n".join(lines) + "\n"


def _md_findings(report: Report) -> list[str]:
    if not report.findings:
        return []
    lines = ["", f"## Findings ({len({item.finding.id for item in report.findings})})", ""]
    lines += ["| finding | kind | upstream | since | run | cells | status |", "|---|---|---|---|---|---|---|"]
    for item in report.findings:
        finding = item.finding
        upstream = md(finding.upstream_status)
        if finding.upstream_url:
            upstream = f"[{upstream}]({finding.upstream_url})"
        lines.append(
            f"| [{md(finding.title)}](#{item.anchor}) | {finding.kind.value} | {upstream} | {md(finding.since())} "
            f"| {md(item.run.label)} | {len(item.cells)} | {md(item.status)} |"
        )
    for item in report.findings:
        lines += ["", f"### {item.anchor}", "", f"{md(item.finding.title)} ({md(item.run.label)}):", ""]
        lines += [f"- {md(ident)}" + (" (fixed?)" if ident in item.fixed else "") for ident in item.cells[:MAX_LISTED]]
        lines += _more(len(item.cells))
    return lines


def _md_differential(report: Report) -> list[str]:
    summary = report.loader_differential
    if not summary.compared and not summary.not_comparable:
        return []
    lines = ["", "## Loader differential (Model Runner V2's draft against V1's, same checkpoint and inputs)", ""]
    lines.append(md(summary.line()))
    lines += [f"- {count}x not comparable: {md(reason)}" for reason, count in summary.not_comparable.items()]
    return lines


def _cell_count(report: Report, run: Run, counts: dict[str, int]) -> str:
    if run.key in report.junit_only:
        # Only a JUnit file told of this run: its testcases are in junit.xml, not in the grid.
        return f"JUnit only: {len(report.junit_only[run.key].cases)} testcases"
    return str(counts.get(run.key, 0))


def _verdicts(summary: dict[str, Any]) -> list[Verdict]:
    return [v for v in VERDICT_ORDER if summary["verdicts"].get(v.value)]


def _md_entry(entry: Entry, reasons: dict[str, int]) -> str:
    marks = SYMBOLS[entry.worst] + " " + md(entry.summary())
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
        refs.append(str(reasons.setdefault(md(text), len(reasons) + 1)))
    return marks + " [" + ", ".join(refs) + ("+" if hidden else "") + "]"


def _md_attention(report: Report) -> list[str]:
    lines: list[str] = []
    missed = [row for row in report.rows if row.cell.outcome != Outcome.MATCH]
    if missed:
        lines += ["", f"## Not as expected ({len(missed)})", ""]
        unrecorded = sum(1 for row in missed if row.cell.unrecorded_fault)
        if unrecorded:
            lines += [f"{unrecorded} of them are unrecorded faults: no finding records them (a new bug?).", ""]
        lines += ["| run | cell | verdict | expected | stage | finding | message |", "|---|---|---|---|---|---|---|"]
        for row in missed[:MAX_LISTED]:
            cell = row.cell
            finding = cell.finding.id if cell.finding else ("unrecorded" if cell.unrecorded_fault else "")
            lines.append(
                f"| {md(row.run)} | {md(cell.id)} | {cell.verdict.value} | {cell.expected.value} "
                f"| {cell.stage.value if cell.stage else ''} | {md(finding)} | {md(cell.message)} |"
            )
        lines += _more(len(missed))
    if report.conflicts or report.junit_conflicts:
        lines += ["", "## Conflicting duplicates (the worse result is kept)", ""]
        items: list[str] = [
            f"- {md(c.run)} {md(c.cell_id)}: {', '.join(c.verdicts)} (kept {c.kept}) from "
            + ", ".join(md(s) for s in c.sources)
            for c in report.conflicts
        ]
        items += [
            f"- JUnit {md(c.run)} {md(c.name)}: {', '.join(c.statuses)} (kept {c.kept}) from "
            + ", ".join(md(s) for s in c.sources)
            for c in report.junit_conflicts
        ]
        lines += items[:MAX_LISTED] + _more(len(items))
    gaps = [row for row in report.rows if row.cell.claim_gap is not None]
    if gaps:
        lines += ["", f"## Claims vs observed ({len(gaps)})", ""]
        lines += [
            f"- {md(row.run)} {md(row.cell.id)}: {row.cell.claim_gap.value if row.cell.claim_gap else ''}"
            f" — claims {'support' if row.cell.claim and row.cell.claim.supported else 'no support'}"
            f"{_claim_reasons(row)}, observed {row.cell.verdict.value}"
            for row in gaps[:MAX_LISTED]
        ]
        lines += _more(len(gaps))
    if report.not_run:
        lines += ["", f"## Planned but not run ({len(report.not_run)})", ""]
        lines += [f"- {md(run)} {md(ident)}" for run, ident in report.not_run[:MAX_LISTED]]
        lines += _more(len(report.not_run))
    if report.stale_expectations:
        lines += ["", "## Stale expectations (rules that matched no cell, findings fixed)", ""]
        lines += [f"- {md(item)}" for item in report.stale_expectations[:MAX_LISTED]]
    return lines


def _claim_reasons(row: CellRun) -> str:
    claim = row.cell.claim
    return f" ({md('; '.join(claim.reasons))})" if claim and claim.reasons else ""


def _more(total: int) -> list[str]:
    return [f"\n… and {total - MAX_LISTED} more: see matrix.html or matrix.json"] if total > MAX_LISTED else []
