"""The start-up stage has teeth: a metadata builder gate that reads the target's KV heads (planted
into TRITON_ATTN's builder) stops exactly the cells whose draft layers run TRITON_ATTN behind a
target with other KV heads, as a crash at stage startup with the gate's words; every other cell
(the same target with a FlashAttention, FlexAttention or FlashInfer draft, and TRITON_ATTN drafts
behind the default target, whose heads are the draft's) keeps its expected verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.runner.session import run_matrix
from harness.stages import Stage
from harness.verdict import Verdict

from . import seam_plants
from .slices import plant_slice_cells

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
# Backends whose builders are not TritonAttentionMetadataBuilder or a subclass of it.
OTHER_BUILDERS = ("FLASH_ATTN", "FLEX_ATTENTION", "FLASHINFER")


def _draft_on_triton(details: dict[str, object]) -> bool:
    layers = details.get("draft_layers")
    return isinstance(layers, list) and any(": TRITON_ATTN (" in str(layer) for layer in layers)


def test_a_builder_gate_on_the_targets_heads_stops_exactly_the_triton_drafts_behind_other_heads() -> None:
    cells = [
        c
        for c in plant_slice_cells()
        if c.values["capability"] == "9.0"
        and c.values["backend"] in ("TRITON_ATTN", "auto", *OTHER_BUILDERS)
        and (
            c.get("target_head") not in (None, "qwen3")
            or (c.values["backend"] == "TRITON_ATTN" and c.values.get("loader") == "v2" and c.get("block_size") == 64)
        )
    ]
    results = run_matrix(
        MATRIX, plants=[f"{seam_plants.__name__}:triton_builder_reads_target_heads"], cell_ids=[c.id for c in cells]
    )
    assert len(results) == len(cells)
    planted = {r.id for r in results if r.axes.get("target_head", "qwen3") != "qwen3" and _draft_on_triton(r.details)}
    assert len(planted) >= 4, planted
    assert any(r.id not in planted and _draft_on_triton(r.details) for r in results), "no TRITON_ATTN control"
    for result in results:
        if result.id in planted:
            assert result.verdict == Verdict.CRASH, (result.id, result.verdict, result.message)
            assert result.stage == Stage.STARTUP, (result.id, result.stage)
            assert seam_plants.TARGET_HEADS_GATE in result.message, result.message
        else:
            assert result.verdict == result.expected, (result.id, result.verdict, result.message)
