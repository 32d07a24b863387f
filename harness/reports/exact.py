"""Every cell field of two reports compared, apart from durations and timestamps: the proof
that a refactoring changed no verdict, expectation, message, claim, backend or error.

``dflash-matrix diff --exact`` runs it. Runs are paired as the ordinary diff pairs them
(``pairing.pair_runs``), cells by id. The comparison is field-generic: it walks each cell's
matrix.json record, so a field added to the record later is compared without a change here.
Left out are the keys that measure time, named by their suffix: ``_s`` (seconds, e.g.
``duration_s`` and ``details.timings_s``) and ``_at`` (timestamps), at any depth; and
``run``, the run key, which names the versions the pairing already matched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness.reports.model import RunResults
from harness.reports.pairing import pair_runs
from harness.reports.text import md
from harness.result import CellResult

EXACT_SCHEMA = "dflash-matrix-exact/1"
TIMING_SUFFIXES = ("_s", "_at")
_NOT_COMPARED = ("run",)
MAX_LISTED = 200


def comparable(value: Any) -> Any:
    """``value`` (a cell record or part of one) without its timing keys."""
    if isinstance(value, dict):
        return {k: comparable(v) for k, v in value.items() if not k.endswith(TIMING_SUFFIXES)}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    return value


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted paths to leaves, so a difference names the field that moved (``details.draft``)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        out = {}
        for index, item in enumerate(value):
            out.update(_flat(item, f"{prefix}[{index}]"))
        return out
    return {prefix: value}


def field_differences(before: CellResult, after: CellResult) -> tuple[tuple[str, Any, Any], ...]:
    """(field, before, after) for every compared field that differs between two records of a cell."""
    old, new = (
        _flat(comparable({k: v for k, v in cell.to_json().items() if k not in _NOT_COMPARED}))
        for cell in (before, after)
    )
    missing = object()
    return tuple(
        (name, old.get(name), new.get(name))
        for name in sorted(set(old) | set(new))
        if old.get(name, missing) != new.get(name, missing)
    )


@dataclass(frozen=True)
class CellDifference:
    run: str
    cell_id: str
    fields: tuple[tuple[str, Any, Any], ...]  # empty when the cell is on one side only
    side: str = ""  # "baseline" or "current" when the cell is only there


@dataclass(frozen=True)
class ExactComparison:
    baseline: str
    current: str
    compared: int  # cells present on both sides
    identical: int
    differences: tuple[CellDifference, ...]

    @property
    def differ(self) -> bool:
        return bool(self.differences)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema": EXACT_SCHEMA,
            "baseline": self.baseline,
            "current": self.current,
            "compared": self.compared,
            "identical": self.identical,
            "differences": [
                {
                    "run": d.run,
                    "id": d.cell_id,
                    "only_in": d.side or None,
                    "fields": [{"field": name, "before": old, "after": new} for name, old, new in d.fields],
                }
                for d in self.differences
            ],
        }


def compare_exact(
    baseline: Sequence[RunResults],
    current: Sequence[RunResults],
    *,
    baseline_name: str = "baseline",
    current_name: str = "current",
) -> ExactComparison:
    compared = identical = 0
    differences: list[CellDifference] = []
    for old, new in pair_runs(baseline, current):
        run = new.run.key if new else old.run.key if old else ""
        before = {cell.id: cell for cell in old.cells} if old else {}
        after = {cell.id: cell for cell in new.cells} if new else {}
        for ident in sorted(set(before) | set(after)):
            was, now = before.get(ident), after.get(ident)
            if was is None or now is None:
                differences.append(CellDifference(run, ident, (), "baseline" if now is None else "current"))
                continue
            compared += 1
            fields = field_differences(was, now)
            if fields:
                differences.append(CellDifference(run, ident, fields))
            else:
                identical += 1
    return ExactComparison(baseline_name, current_name, compared, identical, tuple(differences))


def render_exact_markdown(comparison: ExactComparison) -> str:
    changed = [d for d in comparison.differences if d.fields]
    one_side = [d for d in comparison.differences if not d.fields]
    lines = [
        "# DFlash matrix exact comparison",
        "",
        f"{md(comparison.baseline)} → {md(comparison.current)}: {comparison.compared} cells in both, "
        f"{comparison.identical} identical, {len(changed)} differ; {len(one_side)} on one side only "
        f"(durations and timestamps not compared).",
    ]
    if changed:
        lines += ["", f"## Cells that differ ({len(changed)})", "", "| run | cell | field | before | now |"]
        lines.append("|---|---|---|---|---|")
        for difference in changed[:MAX_LISTED]:
            where = f"| {md(difference.run)} | {md(difference.cell_id)} "
            lines += [
                f"{where}| {md(name)} | {md(str(old))} | {md(str(new))} |" for name, old, new in difference.fields
            ]
        if len(changed) > MAX_LISTED:
            lines.append(f"\n… and {len(changed) - MAX_LISTED} more cells")
    if one_side:
        lines += ["", f"## Cells on one side only ({len(one_side)})", "", "| run | cell | only in |", "|---|---|---|"]
        lines += [f"| {md(d.run)} | {md(d.cell_id)} | {d.side} |" for d in one_side[:MAX_LISTED]]
    return "\n".join(lines) + "\n"
