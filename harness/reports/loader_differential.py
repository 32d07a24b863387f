"""The loader differential as the reports show it: per cell, one line (junit, matrix.html's cell
list), and per report, what was compared and what was not (matrix.md, matrix.html, matrix.json's
summary). Reads ``details.loader_differential`` as ``Observation.loader_differential`` wrote it
(harness/observation.py); a cell without one ran no differential (not loader v2, or the cell
never reached the forward), and the summary counts those apart from the not-comparable ones.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from harness.observation import json_safe
from harness.result import CellResult
from harness.verdict import Verdict


def _record(cell: CellResult) -> dict[str, Any] | None:
    record = cell.details.get("loader_differential")
    return record if isinstance(record, dict) else None


def _diff(layer: dict[str, Any]) -> float:
    try:
        return float(layer.get("max_abs_diff", math.nan))
    except (TypeError, ValueError):
        return math.nan


def describe(cell: CellResult) -> str | None:
    """One line: ``V1 vs V2: bitwise in 2/2 layers, max diff 0`` or why not comparable."""
    record = _record(cell)
    if record is None:
        return None
    if not record.get("comparable"):
        return f"V1 vs V2: not comparable ({record.get('reason', 'no reason recorded')})"
    layers = [layer for layer in record.get("layers", []) if isinstance(layer, dict)]
    bitwise = sum(1 for layer in layers if layer.get("bitwise") is True)
    worst = max((_diff(layer) for layer in layers), default=0.0, key=lambda d: math.inf if math.isnan(d) else d)
    kernels = sorted({f"{layer.get('v2_impl')} vs {layer.get('v1_impl')}" for layer in layers
                      if layer.get("v2_impl") != layer.get("v1_impl")})
    other = f"; different kernels: {', '.join(kernels)}" if kernels else ""
    return f"V1 vs V2: bitwise in {bitwise}/{len(layers)} layers, max diff {worst:.3g}{other}"


@dataclass(frozen=True)
class DifferentialSummary:
    compared: int = 0  # cells with a V1 draft to compare with
    bitwise: int = 0  # ... whose every layer matched bit for bit
    disagreeing: int = 0  # cells judged loader-diff
    worst: float = 0.0  # the largest layer difference over the compared cells
    not_comparable: dict[str, int] = field(default_factory=dict)  # reason -> cells

    def to_json(self) -> dict[str, Any]:
        return {
            "compared": self.compared,
            "bitwise": self.bitwise,
            "disagreeing": self.disagreeing,
            "max_abs_diff": json_safe(self.worst),
            "not_comparable": sum(self.not_comparable.values()),
            "not_comparable_reasons": dict(self.not_comparable),
        }

    def line(self) -> str:
        refused = sum(self.not_comparable.values())
        return (
            f"{self.compared} loader-v2 cells compared with Model Runner V1's draft: {self.bitwise} bitwise, "
            f"{self.disagreeing} disagreeing, max diff {self.worst:.3g}; {refused} not comparable"
        )


def summarize(cells: Iterable[CellResult]) -> DifferentialSummary:
    compared = bitwise = disagreeing = 0
    worst = 0.0
    refused: Counter[str] = Counter()
    for cell in cells:
        record = _record(cell)
        if record is None:
            continue
        if not record.get("comparable"):
            refused[str(record.get("reason", "no reason recorded"))] += 1
            continue
        compared += 1
        layers = [layer for layer in record.get("layers", []) if isinstance(layer, dict)]
        bitwise += all(layer.get("bitwise") is True for layer in layers)
        disagreeing += cell.verdict == Verdict.LOADER_DIFF
        for layer in layers:
            # A NaN stays the worst once seen: it is exactly what the summary must not hide.
            diff = _diff(layer)
            worst = diff if math.isnan(diff) or (not math.isnan(worst) and diff > worst) else worst
    return DifferentialSummary(compared, bitwise, disagreeing, worst, dict(refused.most_common()))
