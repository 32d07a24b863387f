"""The seam audit has teeth in the selection lane: a loader that lets the draft take the
target's KV-cache dtype is wrong-setting, naming layer, setting and both values, in exactly
the cells whose draft asked for its own dtype, and nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.matrix import expand, load_matrix
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import seam_plants
from .pre_fix import BEFORE_FIX, VLLM

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(BEFORE_FIX, reason=f"vLLM {VLLM} has no speculative kv_cache_dtype to lose"),
]

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"


def test_a_draft_kv_dtype_the_loader_drops_is_wrong_setting_exactly_where_the_draft_asked_for_one() -> None:
    cells = [
        c
        for c in expand(load_matrix(MATRIX))
        if c.values["draft_kv_cache_dtype"] == "fp8"
        or (c.values["capability"] == "12.0" and c.values["backend"] == "TRITON_ATTN" and c.values["sink"])
    ]
    results = run_matrix(
        MATRIX, plants=[f"{seam_plants.__name__}:keep_target_cache_dtype"], cell_ids=[c.id for c in cells]
    )
    changed = {r.id: r for r in results if r.verdict != r.expected}
    for result in changed.values():
        assert (result.axes["loader"], result.axes["draft_kv_cache_dtype"]) == ("v2", "fp8"), result.id
        assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
        assert "kv_cache_dtype is auto, the draft asked for fp8" in result.message, result.message
    # The one fp8-draft cell the matrix expects to pass is among them (the others are refused or
    # lost before any layer is built, and stay so).
    assert "sm120-TRITON_ATTN-causal-sink-dkv-fp8-tgtkind.TRITON_ATTN-v2-cubin" in changed, sorted(changed)
    assert any(r.ok and r.axes["draft_kv_cache_dtype"] == "target" for r in results)
