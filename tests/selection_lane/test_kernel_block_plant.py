"""The KV-cache layout check has teeth: a Model Runner V2 speculator that builds the draft's
metadata for another kernel block size than the runner laid its cache out in is wrong-setting
(kernel_block_size, naming layer and both values) in exactly the cells whose --block-size is
not the one it assumes (vLLM's default: 16 up to 0.33.x, 64 from 0.34.0), and nowhere else: not
with --block-size unset, not on loader v1 (whose proposer takes the runner's kernel block sizes;
0.34.0 has none, and its v1 cells keep their expected unavailable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.axes import BLOCK_SIZE_UNSET
from harness.result import CellResult
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import seam_plants
from .kernel_blocks import DEFAULT_BLOCK
from .slices import plant_slice_cells

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"


def _runner_blocks(result: CellResult) -> set[int]:
    """The kernel block sizes the runner laid the draft's layers out in (details.kv_cache)."""
    layout = result.details.get("kv_cache")
    return {int(layer["runner_block"]) for layer in layout["draft_layers"]} if isinstance(layout, dict) else set()


def test_a_speculator_on_its_own_kernel_blocks_is_wrong_setting_exactly_where_the_block_size_is_set() -> None:
    cells = [
        c
        for c in plant_slice_cells()
        if c.values["capability"] == "9.0"
        and c.values["backend"] in ("TRITON_ATTN", "FLASHINFER")
        and c.values["target_attention"] in ("FLASHINFER", "auto")
        and (c.get("block_size") is not None or c.values["target_attention"] == "FLASHINFER")
        and not c.values["causal"]
        and not c.values["sink"]
        and c.values["flashinfer_cubin"]
        and c.values["target_model"] == "qwen3"
        and c.values["method"] == "dflash"
    ]
    results = run_matrix(
        MATRIX, plants=[f"{seam_plants.__name__}:speculator_on_default_blocks"], cell_ids=[c.id for c in cells]
    )
    assert len(results) == len(cells)
    # The plant diverges where the runner's kernel blocks are not its own: a --block-size other
    # than vLLM's default, and (from 0.34.0, which resolves a common kernel block per KV-cache group)
    # only where the group's kernel block is not the default too: a 128-token block behind a
    # FlashInfer target is laid out in 64-token kernel blocks, the plant's own on 0.34.0. The runner's
    # layout is vLLM's (the plant touches only the speculator), recorded in each cell's details.
    set_on_v2 = {
        r.id
        for r in results
        if r.axes["loader"] == "v2"
        and r.axes.get("block_size", BLOCK_SIZE_UNSET) not in (DEFAULT_BLOCK, BLOCK_SIZE_UNSET)
        and _runner_blocks(r) - {DEFAULT_BLOCK}
    }
    assert set_on_v2, "no cell with a --block-size other than the plant's on loader v2"
    for result in results:
        if result.id in set_on_v2:
            assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
            assert f"kernel_block_size is {DEFAULT_BLOCK} in the speculator's metadata builder" in result.message, (
                result.message
            )
        elif result.finding is not None and result.finding.id == "v2-speculator-kernel-block-diverges":
            # vLLM's own divergence (the speculator on the block size, the runner on a smaller kernel
            # block): where the plant's block is the runner's kernel block, the plant happens to undo it.
            assert result.verdict == Verdict.PASS, (result.id, result.verdict, result.message)
        else:
            assert result.verdict == result.expected, (result.id, result.verdict, result.message)


def test_a_speculator_on_the_runners_kernel_blocks_passes_where_vllm_033_disagrees() -> None:
    cells = [
        c
        for c in plant_slice_cells()
        if c.values["capability"] == "9.0"
        and c.values["backend"] == "TRITON_ATTN"
        and c.values["target_attention"] == "FLASHINFER"
        and c.get("block_size") in (64, 128, 256)
        and c.values["loader"] == "v2"
    ]
    results = run_matrix(
        MATRIX, plants=[f"{seam_plants.__name__}:speculator_on_runner_blocks"], cell_ids=[c.id for c in cells]
    )
    assert {r.axes["block_size"] for r in results} == {64, 128, 256}
    for result in results:
        # The 128 and 256 cells are expected wrong-setting (kernel_block_size) on vLLM 0.33.0.
        assert result.verdict == Verdict.PASS, (result.id, result.verdict, result.message)
