"""matrix.md: the compatibility matrix for humans, fit for a GitHub step summary.

One grid per lane run (and per compute capability when the matrix varies it): a row per
backend, a column per (causal, sink) pair, each grid cell naming the verdicts of the cells
behind it; other axes (dtype, sliding window, ...) are counted inside. Then every cell
that did not get its expected verdict, the claim gaps, the cells that never ran and the
stale expectation rules. Messages come from exceptions, so they are escaped: no table
is broken and no markup injected by a stray `|`, `<` or `*`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

from harness.axes import AXES_BY_NAME
from harness.reports.matrix_json import summary
from harness.reports.model import RunReport
from harness.result import CellResult
from harness.verdict import ClaimGap, Outcome, Verdict

GRID_AXES = ("capability", "backend", "causal", "sink")
LIST_LIMIT = 100  # rows per list; the rest is in matrix.json (step summaries are capped at 1 MiB)
GRID_REASON_CHARS = 60
MESSAGE_CHARS = 300
OFF = "\u274c"  # marks a verdict that differs from its expectation
# Every character GitHub Markdown may read as markup inside a table or list item.
_MARKUP = re.compile(r"[\\`*_\[\]<>|~#&!]")
# Terminal escapes and NULs from exception messages (invisible at best, garbage at worst), and
# lone surrogates, which a JSON journal can carry but UTF-8 cannot.
_CONTROL = re.compile(r"[\x00-\x1f\x7f\ud800-\udfff]")


def md(text: object, limit: int | None = None) -> str:
    """One line of plain text, shortened, with markup characters escaped."""
    line = " ".join(_CONTROL.sub(" ", str(text)).split())
    if limit is not None and len(line) > limit:
        line = line[: limit - 1] + "\u2026"
    return _MARKUP.sub(lambda match: "\\" + match.group(0), line)


def code(ident: str) -> str:
    # Cell ids are held to [A-Za-z0-9_.-] when read, so a code span needs no escaping.
    return f"`{ident}`"


def _label(value: object, yes: str, no: str) -> str:
    return yes if value is True else no if value is False else md(value)


def _column_title(key: tuple[Any, Any]) -> str:
    causal, sink = key
    return f"{_label(causal, 'causal', 'non-causal')}, {_label(sink, 'sink', 'no sink')}"


def _ordered(values: Iterable[Hashable]) -> list[Any]:
    # True before False (causal/sink read best that way), then anything else by its text.
    return sorted(set(values), key=lambda v: (v is not True, v is not False, str(v)))


def _variant(cell: CellResult) -> str:
    """The cell's id without the tokens the grid position already says (e.g. ``bf16-swa128``)."""
    tokens = cell.id.split("-")
    for name in GRID_AXES:
        if name not in cell.axes:
            continue
        try:
            token = AXES_BY_NAME[name].token(cell.axes[name])
        except (KeyError, ValueError, TypeError):
            continue
        if token in tokens:
            tokens.remove(token)
    return "-".join(tokens) or cell.id


def _grid_entry(bucket: Sequence[CellResult]) -> str:
    groups: dict[tuple[Verdict, Outcome, Verdict], list[CellResult]] = {}
    for cell in bucket:
        groups.setdefault((cell.verdict, cell.outcome, cell.expected), []).append(cell)
    parts = []
    for (verdict, how, expected), members in groups.items():
        text = verdict.value
        if len(bucket) > 1:
            text += f" \u00d7{len(members)}"
        if len(groups) > 1:
            variants = [_variant(cell) for cell in members]
            text += " (" + md(", ".join(variants[:3]) + (", \u2026" if len(variants) > 3 else "")) + ")"
        if verdict != Verdict.PASS:
            text += ": " + md(members[0].message, GRID_REASON_CHARS)
        if how != Outcome.MATCH:
            text = f"{OFF} {text} (expected {expected.value})"
        parts.append(text)
    return "<br>".join(parts)


def _grid(cells: Sequence[CellResult]) -> list[str]:
    sinks = _ordered(cell.axes.get("sink") for cell in cells)
    columns = [(causal, sink) for causal in _ordered(cell.axes.get("causal") for cell in cells) for sink in sinks]
    backends = list(dict.fromkeys(str(cell.axes.get("backend")) for cell in cells))
    buckets: dict[tuple[str, Any, Any], list[CellResult]] = {}
    for cell in cells:
        key = (str(cell.axes.get("backend")), cell.axes.get("causal"), cell.axes.get("sink"))
        buckets.setdefault(key, []).append(cell)
    lines = [
        "| backend | " + " | ".join(_column_title(column) for column in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for backend in backends:
        entries = [_grid_entry(buckets.get((backend, *column), [])) or "\u2013" for column in columns]
        lines.append(f"| {md(backend)} | " + " | ".join(entries) + " |")
    return lines


def _capped(items: Sequence[Any], render: Callable[[Any], str]) -> list[str]:
    lines = [render(item) for item in items[:LIST_LIMIT]]
    if len(items) > LIST_LIMIT:
        lines.append(f"\n\u2026 and {len(items) - LIST_LIMIT} more in matrix.json")
    return lines


def _mismatch_row(cell: CellResult) -> str:
    stage = cell.stage.value if cell.stage else "\u2013"
    expected = cell.expected.value + (f" ({md(cell.expected_reason, 80)})" if cell.expected_reason else "")
    return (
        f"| {code(cell.id)} | {cell.outcome.value} | {expected} | {cell.verdict.value} | {stage} "
        f"| {md(cell.message, MESSAGE_CHARS)} |"
    )


def _claim_row(cell: CellResult) -> str:
    reasons = "; ".join(cell.claim.reasons) if cell.claim else ""
    claimed = "supported" if cell.claim and cell.claim.supported else "not supported"
    return (
        f"| {code(cell.id)} | {claimed} | {md(reasons, MESSAGE_CHARS) or chr(0x2013)} | {cell.verdict.value} "
        f"| {md(cell.message, MESSAGE_CHARS)} |"
    )


def _run_line(report: RunReport) -> str:
    run = report.run
    facts = [
        f"platform {md(run['platform'])}" if run.get("platform") else None,
        f"device {md(run['device'])}" if run.get("device") else None,
        f"vLLM {md(run['vllm_version'])}" if run.get("vllm_version") else None,
        f"torch {md(run['torch_version'])}" if run.get("torch_version") else None,
        f"matrix {md(run['matrix'])}" if run.get("matrix") else None,
        f"started {md(run['started_at'])}" if run.get("started_at") else None,
        f"ended {md(run['ended_at'])}" if run.get("ended_at") else "did not finish",
    ]
    return " \u00b7 ".join(fact for fact in facts if fact)


def render_markdown_text(report: RunReport) -> str:
    counts = summary(report)
    out = [f"## DFlash compatibility matrix: {md(report.lane)} lane", "", _run_line(report), ""]
    status = (
        f"**{counts['cells']} cells**: {counts['match']} as expected, {counts['mismatching']} not"
        f"; {counts['not_run']} not run; {counts['stale_expectations']} stale expectation rules"
    )
    out += [status, ""]
    verdicts = [f"{verdict} {n}" for verdict, n in counts["verdicts"].items() if n]
    if verdicts:
        out += ["Verdicts: " + " \u00b7 ".join(verdicts), ""]
    if not report.finished:
        out += ["**The run did not finish** (killed or interrupted): this matrix is partial.", ""]

    by_capability: dict[str, list[CellResult]] = {}
    for cell in report.cells:
        by_capability.setdefault(str(cell.axes.get("capability", "")), []).append(cell)
    for capability, cells in by_capability.items():
        title = f"### Capability {md(capability)}" if capability else "### Backends by (causal, sink)"
        out += [title, "", *_grid(cells), ""]
    if report.cells:
        legend = f"Entries: verdict, \u00d7 count when other axes split the cell; {OFF} = not the expected verdict."
        out += [legend, ""]

    if report.mismatching:
        out += [f"### Not as expected ({len(report.mismatching)})", ""]
        out += ["| cell | outcome | expected | observed | stage | message |", "|---|---|---|---|---|---|"]
        out += [*_capped(report.mismatching, _mismatch_row), ""]
    for gap, what in (
        (ClaimGap.OVER_CLAIM, "claims support, but the cell fails"),
        (ClaimGap.UNDER_CLAIM, "claims no support, but the cell works"),
    ):
        cells_with_gap = report.claim_gaps(gap)
        if cells_with_gap:
            out += [f"### {gap.value.capitalize()}s ({len(cells_with_gap)}): the backend {what}", ""]
            out += ["| cell | claim | claim reasons | observed | message |", "|---|---|---|---|---|"]
            out += [*_capped(cells_with_gap, _claim_row), ""]
    if report.not_run:
        out += [f"### Not run ({len(report.not_run)})", ""]
        out += [*_capped(report.not_run, lambda ident: f"- {code(ident)}"), ""]
    if report.stale_expectations:
        out += [f"### Stale expectation rules ({len(report.stale_expectations)})", ""]
        out += [*_capped(report.stale_expectations, lambda line: f"- {md(line, MESSAGE_CHARS)}"), ""]
    return "\n".join(out)


def render_markdown(report: RunReport) -> bytes:
    return render_markdown_text(report).encode("utf-8")
