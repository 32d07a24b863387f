"""The family's loaders are guarded one by one: a DSpark loader that loses the request is
caught as wrong-backend in DSpark cells and nowhere else (dflash and dflash2 share
``load_dflash_model``, which the plant leaves alone)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contracts.lanes import SELECTION
from harness.matrix import expand, load_matrix
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import sibling_loader
from .pre_fix import BEFORE_FIX, VLLM
from .slices import plant_slice_cells

# vLLM < 0.25 has no DSpark loader (its dspark cells are unavailable, recorded in the expectations).
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(BEFORE_FIX, reason=f"vLLM {VLLM} has no Model Runner V2 DSpark loader"),
]

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
# What the target brings and the draft's own head size and KV dtypes.
SEAM_AXES = (
    "target_attention",
    "target_model",
    "target_dtype",
    "target_head",
    "block_size",
    "kv_cache_dtype",
    "draft_kv_cache_dtype",
    "head_size",
)
# The DSpark cell that passes as installed and, with the loader's backend dropped, falls back to
# the target's FlashInfer.
LOST = "sm100-FLASH_ATTN_DIFFKV-dspark-causal-sink-kv-fp8-dkv-bfloat16-tgt.FLASHINFER-tgthead.llama32-v2-cubin"


def test_a_dspark_loader_without_backend_is_wrong_backend_in_dspark_cells_only() -> None:
    # The v2 cells of a non-default method and their dflash neighbours on the same backends, on
    # SM90 (the plant is in the loader; a generation decides only which backend answers, and each
    # is a cell process of its own; the selection lane itself runs the others). SM100 stays out but
    # for the one DSpark cell whose draft is built behind a target on FlashInfer: most other DSpark
    # rows of the covering stop at a target vLLM refuses.
    everything = expand(load_matrix(MATRIX))
    cells = [c for c in plant_slice_cells() if c.values["loader"] == "v2" and c.values["capability"] == "9.0"]
    # The three families' own members (the other draft classes of issue 38 share these loaders; their
    # own plant is tests/selection_lane/test_draft_model_plant.py).
    family = [c for c in cells if c.values["method"] in ("dflash2", "dspark")] + [c for c in everything if c.id == LOST]
    backends = {c.values["backend"] for c in family}
    # The dflash neighbours: behind the default target, causal and not (the seam cells behind
    # other targets go through the same load_dflash_model; tests/selection_lane/test_seam_plants.py).
    plain = [
        c
        for c in cells
        if c.values["method"] == "dflash"
        and c.values["backend"] in backends
        and c.values["capability"] == "9.0"
        and c.values["sink"]
        and c.values["flashinfer_cubin"]
        and all(SELECTION.value(c.values, axis) == SELECTION.value({}, axis) for axis in SEAM_AXES)
    ]
    results = run_matrix(MATRIX, plants=[f"{sibling_loader.__name__}:plant"], cell_ids=[c.id for c in family + plain])
    changed = {r.id: r for r in results if r.verdict != r.expected}
    for result in changed.values():
        assert result.axes["method"] == "dspark", (result.id, result.verdict, result.message)
        assert result.verdict == Verdict.WRONG_BACKEND, (result.id, result.verdict, result.message)
    # The DSpark cell that passes as installed: its draft falls back to the target's FlashInfer.
    lost = changed.get(LOST)
    assert lost is not None and lost.observed_backends == ("FLASHINFER",), sorted(changed)
    assert any(r.axes["method"] == "dflash2" and r.ok for r in results)
    assert any(r.axes["method"] == "dflash" and r.ok for r in results)
