"""The selection matrix's [[stops_before_draft]] declarations are vLLM's behaviour, not a guess
(issue 35): the covering counts no tuple in a cell they match, so each must be a cell whose target
vLLM refuses. For every declaration, a cell it matches stops at the target ("the target failed
first"), and each cell one axis away from it (that axis set outside the declaration) does not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.axes import AxisValue, cell_id
from harness.matrix import StopBeforeDraft, load_matrix, selector_matches
from harness.runner.session import run_matrix

from .pre_fix import VLLM

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
# The lane's detail for a cell whose target failed to build under the cell's config
# (harness/lanes/selection/process_state.py, _TargetNotBuilt).
STOPPED = "not built: the target failed first"
# The draft every row asks for: no request of its own that the platform could refuse first.
DRAFT: dict[str, AxisValue] = {
    "backend": "auto",
    "causal": False,
    "sink": False,
    "flashinfer_cubin": True,
    "loader": "v2",
}


def _rows() -> list[tuple[dict[str, AxisValue], bool]]:
    """(row, stops) for each declaration's first match and its one-axis neighbours."""
    matrix = load_matrix(MATRIX)
    every = dict(matrix.all_axes)
    rows: list[tuple[dict[str, AxisValue], bool]] = []
    for stop in matrix.stops_before_draft:
        match = {"capability": "9.0", **DRAFT, **{name: values[0] for name, values in stop.when}}
        rows.append((match, True))
        for name, values in stop.when:
            outside = next(v for v in every[name] if v not in values)
            near = {**match, name: outside}
            rows.append((near, _declared(matrix.stops_before_draft, near)))
    return rows


def _declared(stops: tuple[StopBeforeDraft, ...], row: dict[str, AxisValue]) -> bool:
    return any(selector_matches(stop.when, row) for stop in stops)


def _toml(value: AxisValue) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value).replace("'", '"')


@pytest.mark.skipif(VLLM.release < (0, 30), reason="declared from vLLM 0.30.0's target refusals (the recorded default)")
def test_each_declared_stop_is_a_target_vllm_refuses_and_its_neighbours_are_not(tmp_path: Path) -> None:
    rows = _rows()
    blocks = "\n".join(
        "[[product]]\n" + "\n".join(f"{name} = [{_toml(value)}]" for name, value in row.items()) + "\n"
        for row, _ in rows
    )
    path = tmp_path / "stops.toml"
    path.write_text(
        '[matrix]\nname = "stops"\nlane = "selection"\ntimeout_s = 240\n\n'
        '[axes]\ncapability = ["9.0"]\nbackend = ["auto"]\ncausal = [false]\nsink = [false]\n'
        'flashinfer_cubin = [true]\nloader = ["v2"]\n\n' + blocks
    )
    matrix = load_matrix(path)
    results = {r.id: r for r in run_matrix(matrix)}
    assert {cell_id(row) for row, _ in rows} <= set(results)  # and the [axes] row, a control of its own
    wrong = []
    for row, stops in rows:
        result = results[cell_id(row)]
        stopped = str(result.details.get("draft", "")).startswith(STOPPED)
        if stopped != stops:
            wrong.append(f"{result.id}: declared {'stops' if stops else 'reaches'}, lane: {result.message[:120]}")
    assert not wrong, "\n".join(wrong)
