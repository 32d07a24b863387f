"""The head audit has teeth in the selection lane (issue 38): a vLLM whose attention layers take
their query and KV heads from the current config's model (the target's, under every DFlash
loader) is wrong-setting, naming num_heads / num_kv_heads and both values, in exactly the cells
whose draft's own heads differ from its target's, and nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.deployment.models import SELECTION_SHAPE, TARGET_HEADS
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import seam_plants
from .slices import plant_slice_cells

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
# Backends whose builders or gates read heads (docs/explanation/target-draft-seam.md, 2.10).
HEAD_READERS = ("auto", "TRITON_ATTN", "FLASHINFER", "FLEX_ATTENTION")


def _heads(axes: dict[str, object]) -> tuple[tuple[int, int], tuple[int, int]]:
    """(the draft's own heads, its target's heads), as the harness wrote their checkpoints."""
    query, kv = (int(part) for part in str(axes.get("draft_heads", "2/1")).split("/"))
    target = str(axes.get("target_head", "qwen3"))
    target_heads = (SELECTION_SHAPE.heads, SELECTION_SHAPE.kv_heads) if target == "qwen3" else TARGET_HEADS[target][:2]
    return (query, kv), target_heads


def test_a_draft_layer_that_takes_the_target_heads_is_wrong_setting_exactly_where_they_differ() -> None:
    # SM90 (one cell process): the draft_heads product's every backend and the covering's
    # draft_heads cells; other targets' heads behind a 2/1 draft on the backends whose builders read
    # heads; and the default draft behind the default target as the control.
    controls = {f"sm90-{backend}-noncausal-nosink-v2-cubin" for backend in ("auto", "FLASH_ATTN", "FLASHINFER")}
    cells = [
        c
        for c in plant_slice_cells()
        if c.values["capability"] == "9.0"
        and c.values["flashinfer_cubin"]
        and (
            c.values.get("draft_heads", "2/1") != "2/1"
            or (c.values.get("target_head", "qwen3") != "qwen3" and c.values["backend"] in HEAD_READERS)
            or c.id in controls
        )
    ]
    results = run_matrix(
        MATRIX, plants=[f"{seam_plants.__name__}:draft_takes_target_heads"], cell_ids=[c.id for c in cells]
    )
    assert len(results) == len(cells)
    should = {r.id for r in results if r.expected == Verdict.PASS and _heads(r.axes)[0] != _heads(r.axes)[1]}
    changed = {r.id: r for r in results if r.verdict != r.expected}
    assert len(should) >= 20, sorted(should)
    assert set(changed) == should, (sorted(set(changed) - should), sorted(should - set(changed)))
    for result in changed.values():
        (query, kv), (target_query, target_kv) = _heads(result.axes)
        assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
        if query != target_query:
            assert f"num_heads is {target_query}, the draft asked for {query}" in result.message, result.message
        if kv != target_kv:
            assert f"num_kv_heads is {target_kv}, the draft asked for {kv}" in result.message, result.message
    # Where the heads agree the plant changes nothing: those cells are the control.
    assert any(r.ok and _heads(r.axes)[0] == _heads(r.axes)[1] for r in results)
