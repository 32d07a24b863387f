"""matrix.html: one self-contained page (inline CSS and JS, no network) for people.

The grid (multi-device view) is rendered by Jinja with autoescaping. The per-cell list
can hold 100k cells, so it is shipped once as compact JSON (strings interned in a
table, one array of small integers per cell) and drawn page by page in the browser
with ``textContent``: markup in a test's output is only ever text. The JSON sits in a
``<script type="application/json">`` block written with Jinja's ``tojson``, which
escapes ``<``, ``>``, ``&`` and ``'``, so a message holding ``</script>`` cannot end
the block.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape

from harness.reports import loader_differential
from harness.reports.device_grid import CLAIM_GAP, CONFLICT, MISSED, SYMBOLS, Entry, Grid, build_grids, row_label
from harness.reports.json_text import conflict_json, junit_conflict_json
from harness.reports.model import Report
from harness.verdict import VERDICT_ORDER, Outcome, severity

# Columns of each cell's array in the embedded data, in order.
CELL_FIELDS = (
    "run",
    "id",
    "backend",
    "observed",
    "verdict",
    "expected",
    "outcome",
    "stage",
    "message",
    "reason",
    "claim",
    "gap",
    "axes",
    "error",
    "duration",
    "conflict",
    "differential",
)
MAX_SECTION_ITEMS = 500
MAX_TITLE_REASONS = 8


@functools.lru_cache(maxsize=1)
def _environment() -> Environment:
    # One per process: jinja compiles each template once per environment, and merge, diff and
    # history write many reports in one process.
    env = Environment(
        loader=PackageLoader("harness.reports", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    return env


def cell_data(report: Report) -> dict[str, Any]:
    # Interning table: the same message, run or verdict across 100k cells is stored once.
    # setdefault inline (not a helper call per field) keeps this cheap; verdicts and the
    # like go in as their StrEnum members, which hash and serialise as their text.
    table: dict[str, int] = {}
    axes_text: dict[str, str] = {}  # a cell id stands for its axes, whichever run it is in
    rows = []
    # What needs a person's attention first: missed expectations, then the worst verdicts.
    ordered = sorted(report.rows, key=lambda r: (r.cell.outcome == Outcome.MATCH, -severity(r.cell.verdict)))
    for row in ordered:
        cell = row.cell
        claim = ""
        if cell.claim is not None:
            claim = ("claims support" if cell.claim.supported else "claims no support") + (
                ": " + "; ".join(cell.claim.reasons) if cell.claim.reasons else ""
            )
        error = ""
        if cell.max_abs_err is not None:
            error = f"{cell.max_abs_err:.3g}" + (f" / {cell.tolerance:.3g}" if cell.tolerance is not None else "")
        axes = axes_text.get(cell.id)
        if axes is None:
            axes = axes_text[cell.id] = " ".join(f"{k}={v}" for k, v in cell.axes.items() if k != "backend")
        rows.append(
            [
                table.setdefault(row.run, len(table)),
                table.setdefault(cell.id, len(table)),
                table.setdefault(cell.requested_backend or "auto", len(table)),
                table.setdefault(", ".join(cell.observed_backends), len(table)),
                table.setdefault(cell.verdict, len(table)),
                table.setdefault(cell.expected, len(table)),
                table.setdefault(cell.outcome, len(table)),
                table.setdefault(cell.stage or "", len(table)),
                table.setdefault(cell.message, len(table)),
                table.setdefault(
                    cell.expected_reason + (f" · finding {cell.finding.id}" if cell.finding else ""), len(table)
                ),
                table.setdefault(claim, len(table)),
                table.setdefault(cell.claim_gap or "", len(table)),
                table.setdefault(axes, len(table)),
                table.setdefault(error, len(table)),
                round(cell.duration_s, 2),
                1 if row.conflict else 0,
                table.setdefault(loader_differential.describe(cell) or "", len(table)),
            ]
        )
    return {
        "fields": list(CELL_FIELDS),
        "strings": [str(text) for text in table],  # dicts keep insertion order: position == index
        "cells": rows,
        "runs": {
            run.key: {"label": run.label, "lane": run.lane, "device": run.device, "vllm": run.vllm_version}
            for run in report.runs
        },
    }


def _entry_view(entry: Entry) -> dict[str, Any]:
    shown, hidden = entry.reasons(MAX_TITLE_REASONS)
    title = "\n".join(f"{count}x {text}" for text, count in shown) + (f"\n… {hidden} more" if hidden else "")
    verdicts = sorted({row.cell.verdict.value for row in entry.rows})
    return {
        "worst": entry.worst.value,
        "symbol": SYMBOLS[entry.worst],
        "summary": entry.summary(),
        "missed": entry.missed,
        "gaps": entry.claim_gaps,
        "conflicts": entry.conflicts,
        "verdicts": " ".join(verdicts),
        "title": title,
        "reasons": shown,
        "hidden": hidden,
        "quiet": entry.worst.value == "pass" and not entry.missed and not entry.claim_gaps,
    }


def render_html(report: Report, grids: Sequence[Grid] | None = None, generated: str | None = None) -> str:
    views = []
    for grid in build_grids(report) if grids is None else grids:
        rows = []
        for key in grid.rows:
            entries = []
            for column in grid.columns:
                entry = grid.entry(key, column)
                entries.append(_entry_view(entry) if entry else None)
            rows.append({"label": row_label(key), "backend": key[0], "entries": entries})
        views.append(
            {
                "lane": grid.lane,
                "columns": [
                    {"label": c.label, "device": c.run.device, "vllm": c.run.vllm_version, "key": c.key}
                    for c in grid.columns
                ],
                "rows": rows,
            }
        )
    counts: dict[str, int] = {}
    for row in report.rows:
        counts[row.run] = counts.get(row.run, 0) + 1
    runs = [
        {
            "run": run,
            "state": report.state(run.key),
            "incomplete": report.incomplete(run.key),
            "cells": (
                f"JUnit only: {len(report.junit_only[run.key].cases)} testcases"
                if run.key in report.junit_only
                else counts.get(run.key, 0)
            ),
            "extra": {
                k: v
                for k, v in sorted(run.meta.items())
                if k not in ("lane", "platform", "device", "vllm_version", "torch_version", "stale_expectations")
            },
        }
        for run in report.runs
    ]
    missed = sum(1 for row in report.rows if row.cell.outcome != Outcome.MATCH)
    summary = report.summary()
    template = _environment().get_template("matrix.html.j2")
    return template.render(
        nonce=secrets.token_urlsafe(16),
        generated=generated or datetime.now(UTC).isoformat(timespec="seconds"),
        summary=summary,
        verdict_order=[v.value for v in VERDICT_ORDER],
        verdict_counts=[(v.value, SYMBOLS[v], summary["verdicts"].get(v.value, 0)) for v in VERDICT_ORDER],
        symbols={v.value: s for v, s in SYMBOLS.items()},
        marks={"missed": MISSED, "gap": CLAIM_GAP, "conflict": CONFLICT},
        missed=missed,
        runs=runs,
        grids=views,
        backends=sorted({row.cell.requested_backend or "auto" for row in report.rows}),
        devices=sorted({run.device for run in report.runs}),
        versions=sorted({run.vllm_version for run in report.runs}),
        conflicts=[conflict_json(c) for c in report.conflicts][:MAX_SECTION_ITEMS],
        junit_conflicts=[junit_conflict_json(c) for c in report.junit_conflicts][:MAX_SECTION_ITEMS],
        conflict_total=len(report.conflicts) + len(report.junit_conflicts),
        not_run=report.not_run[:MAX_SECTION_ITEMS],
        not_run_total=len(report.not_run),
        stale=[str(item) for item in report.stale_expectations][:MAX_SECTION_ITEMS],
        findings=[
            {
                "anchor": item.anchor,
                "id": item.finding.id,
                "title": item.finding.title,
                "kind": item.finding.kind.value,
                "upstream": item.finding.upstream_status,
                "url": item.finding.upstream_url,
                "since": item.finding.since(),
                "run": item.run.label,
                "cells": item.cells[:MAX_SECTION_ITEMS],
                "fixed": set(item.fixed),
                "status": item.status,
            }
            for item in report.findings
        ],
        data=cell_data(report),
        differential=report.loader_differential,
        differential_line=report.loader_differential.line(),
        incomplete=[item for item in runs if item["incomplete"]],
    )
