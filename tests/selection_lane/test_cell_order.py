"""A verdict does not depend on the cells a process ran before it: with the per-cell reset, a
selector memo that carries answers between cells moves no verdict in any order; without it, the
order moves the cells whose answer the memo carries (docs/explanation/isolation.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.matrix import expand, load_matrix
from harness.order import parse_order
from harness.result import CellResult
from harness.runner.session import run_matrix

from . import isolation_plants

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"

# One cell process (SM90, cubins): FLASH_ATTN and auto-selection behind targets of each dtype and
# model, where the answer turns on them (FlashAttention takes no float32 and no prefix-LM flag).
CELLS = [
    cell.id
    for cell in expand(load_matrix(MATRIX))
    if cell.values["capability"] == "9.0"
    and cell.values["flashinfer_cubin"]
    and cell.values["backend"] in ("FLASH_ATTN", "auto")
    and cell.values["loader"] == "v2"
    and cell.values.get("target_attention") == "auto"
    # The axes issue 38 added, at their defaults: the memo's reach is the target's dtype and model.
    and cell.values.get("draft_option", "none") == "none"
    and cell.values.get("draft_heads", "2/1") == "2/1"
    and cell.values.get("kv_cache_dtype", "auto") in ("auto", "fp8", "fp8_e5m2")
    and cell.values.get("cudagraph", "eager") == "eager"
]


def _run(order: str, *plants: str) -> dict[str, CellResult]:
    names = [f"{isolation_plants.__name__}:{plant}" for plant in plants]
    results = run_matrix(MATRIX, plants=names, cell_ids=CELLS, order=parse_order(order))
    return {r.id: r for r in results}


def _verdicts(results: dict[str, CellResult]) -> dict[str, tuple[str, str]]:
    return {ident: (r.verdict.value, r.message) for ident, r in results.items()}


def test_the_slice_has_targets_of_every_dtype() -> None:
    dtypes = {cell.values.get("target_dtype") for cell in expand(load_matrix(MATRIX)) if cell.id in set(CELLS)}
    assert dtypes == {"bfloat16", "float16", "float32"} and len(CELLS) < 80


def test_with_the_reset_a_carrying_memo_moves_no_cell_in_either_order() -> None:
    for order in ("default", "reverse"):
        results = _run(order, "carry_selector_answers")
        wrong = [
            f"{r.id}: {r.verdict.value} ({r.message}), want {r.expected.value}" for r in results.values() if not r.ok
        ]
        assert wrong == [], (order, wrong)


def test_without_the_reset_the_order_moves_cells_the_memo_reached() -> None:
    default = _run("default", "carry_selector_answers", "no_reset")
    reverse = _run("reverse", "carry_selector_answers", "no_reset")
    moved = {i for i in CELLS if _verdicts(default)[i] != _verdicts(reverse)[i]}
    assert moved, "the order moved no cell: the plant carried nothing"
    for ident in moved:
        # A moved cell is wrong in the order where a cell behind another target ran before it.
        wrong = [run[ident] for run in (default, reverse) if not run[ident].ok]
        assert wrong, ident
