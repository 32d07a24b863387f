"""PR #46770 guarded: the pre-fix loader must be caught as `wrong-backend`.

Before the fix, Model Runner V2's ``load_dflash_model`` dropped the speculative config's
``attention_backend`` on its way to the draft. These tests plant that loader (a copy of the
installed one without the fix line, ``prefix_loader``) into the real lane's cell processes
and check what the harness reports. If the harness's wrong-backend detection goes, the
first test fails: nothing else in a cell says the request was lost.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.result import CellResult
from harness.runner.session import run_matrix
from harness.stages import Stage
from harness.verdict import Verdict

from . import prefix_loader
from .pre_fix import BEFORE_FIX, HAS_V1, LACKS_V1, VLLM

# vLLM < 0.25 is the pre-fix loader itself: there is no fix line to take out, and the lane's
# 0.24.0 expectations judge its dropped requests (wrong-backend) in every v2 cell.
pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(BEFORE_FIX, reason=f"vLLM {VLLM} predates PR #46770: no fix to plant away"),
]

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
PRE_FIX = f"{prefix_loader.__name__}:plant"


def _by_id(results: list[CellResult]) -> dict[str, CellResult]:
    return {result.id: result for result in results}


def test_prefix_loader_loses_a_triton_request_for_a_sink_draft() -> None:
    v2 = [f"{cap}-TRITON_ATTN-{mask}-sink-v2-cubin" for cap in ("sm90", "sm100") for mask in ("causal", "noncausal")]
    v1 = ["sm90-TRITON_ATTN-noncausal-sink-v1-cubin"]
    results = _by_id(run_matrix(MATRIX, plants=[PRE_FIX], cell_ids=v2 + v1))

    for cell_id in v2:
        result = results[cell_id]
        assert result.verdict == Verdict.WRONG_BACKEND, (cell_id, result.verdict, result.message)
        assert result.stage == Stage.BUILD
        assert result.platform_choice == "TRITON_ATTN"
        # The draft fell back to auto-selection: FA3/FA4, or FlashInfer for causal sinks on SM100.
        assert "TRITON_ATTN" not in result.observed_backends
        assert set(result.observed_backends) <= {"FLASH_ATTN", "FLASHINFER"}, result.observed_backends
    # Model Runner V1 builds its draft config itself and always passed the request on; from
    # vLLM 0.34.0 there is no V1 proposer, and the cell says so instead of running another loader.
    if HAS_V1:
        assert results[v1[0]].verdict == Verdict.PASS
        assert results[v1[0]].observed_backends == ("TRITON_ATTN",)
    else:
        assert results[v1[0]].verdict == Verdict.UNAVAILABLE, results[v1[0]].message
        assert results[v1[0]].message.startswith(LACKS_V1), results[v1[0]].message


def test_prefix_loader_inherits_the_targets_flashinfer() -> None:
    """With --attention-backend FLASHINFER on the target, the pre-fix draft inherits it."""
    cells = ["sm100-TRITON_ATTN-noncausal-sink-v2-cubin", "sm100-TRITON_ATTN-noncausal-sink-v2-nocubin"]
    results = _by_id(run_matrix(MATRIX, plants=[PRE_FIX], cell_ids=cells, options={"target_backend": "FLASHINFER"}))

    with_cubins = results[cells[0]]
    assert with_cubins.verdict == Verdict.WRONG_BACKEND, with_cubins.message
    assert with_cubins.observed_backends == ("FLASHINFER",)

    # Without TRT-LLM cubins FlashInfer has no sinks: the build dies on a configuration
    # error about a backend the user never asked for (the symptom the PR reported). The
    # platform accepts TRITON_ATTN, so that is the request lost: wrong-backend, with vLLM's error.
    without = results[cells[1]]
    assert without.verdict == Verdict.WRONG_BACKEND, without.message
    assert without.stage == Stage.BUILD
    assert without.observed_backends == ("FLASHINFER",)
    assert "attention sinks not supported" in without.details["draft"]


def test_fixed_loader_keeps_the_request_and_drops_the_targets_backend() -> None:
    cells = [
        "sm100-TRITON_ATTN-noncausal-sink-v2-nocubin",
        "sm100-TRITON_ATTN-noncausal-sink-v1-nocubin",
        "sm100-auto-noncausal-sink-v2-nocubin",
    ]
    results = _by_id(run_matrix(MATRIX, cell_ids=cells, options={"target_backend": "FLASHINFER"}))

    for cell_id in cells[: 2 if HAS_V1 else 1]:
        assert results[cell_id].verdict == Verdict.PASS, results[cell_id].message
        assert results[cell_id].observed_backends == ("TRITON_ATTN",)
    if not HAS_V1:
        assert results[cells[1]].verdict == Verdict.UNAVAILABLE, results[cells[1]].message
        assert results[cells[1]].message.startswith(LACKS_V1), results[cells[1]].message
    # With no draft backend the fixed loader auto-selects and discards the target's FLASHINFER
    # (the EAGLE path overrides only fields that are set): recorded, not judged.
    auto = results[cells[2]]
    assert auto.verdict == Verdict.PASS
    assert auto.observed_backends == ("FLASH_ATTN",)
    assert auto.details["target_backend"] == "FLASHINFER"
