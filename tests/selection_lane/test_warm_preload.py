"""The warm parent's device-count check against the real torch of the lane's env: a preload
module that asks torch whether CUDA is available at import (as xgrammar's tvm_ffi does in vLLM
0.33.0's env, which is why SELECTION.preload leaves xgrammar out) makes every cell fail with the
reason, instead of forking cell processes that would all keep the runner's device count. That the
lane's own preload leaves no hazard is shown by every selection cell, which would fail the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.contracts.lanes import SELECTION
from harness.contracts.model import Preload
from harness.matrix import expand, load_matrix
from harness.runner.supervisor import CellRunner
from harness.runner.warm import WarmParent

pytestmark = pytest.mark.vllm

PLANTED = "dflash_planted_asks_device_count"


def test_a_preload_module_that_asks_for_the_device_count_fails_every_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / f"{PLANTED}.py").write_text("import torch\n\ntorch.cuda.is_available()\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned warm parent gets the runner's sys.path
    matrix = load_matrix("matrices/selection.toml")
    cells = [cell for cell in expand(matrix) if cell.id.startswith("sm90-TRITON_ATTN-causal-sink-v2-")]
    runner = CellRunner(matrix)
    runner._warm = WarmParent(Preload((*SELECTION.preload.modules, PLANTED)), runner.environment)
    try:
        results = [runner.run(cell) for cell in cells]
    finally:
        runner.close()
    assert len(results) == 2  # cubin and nocubin: two process keys, both refused
    for result in results:
        assert result.failure is not None and result.failure.error_type == "LaneStartup"
        assert "asked torch for the device count" in result.failure.message
        assert "torch._C._cuda_getDeviceCount" in result.failure.message
