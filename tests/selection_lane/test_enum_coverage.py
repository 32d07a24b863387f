"""Every non-MLA decoder backend vLLM's AttentionBackendEnum offers is in the selection matrix,
and a member the matrix leaves out is reported on every cell rather than passed over."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.runner.session import run_matrix

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"


def test_a_backend_missing_from_the_matrix_is_named_in_every_cell(tmp_path: Path) -> None:
    # The shipped matrix minus FLEX_ATTENTION (from the backend axis and from the family's and the
    # draft heads', the adaptive-verification and the two draft-class [[product]] blocks, which list every
    # backend, or every CUDA one, too): the lane must
    # name exactly that member,
    # which also proves the shipped matrix names every other decoder member of this vLLM.
    text = MATRIX.read_text()
    trimmed, removed = re.subn(r'^\s*"FLEX_ATTENTION",\n', "", text, flags=re.MULTILINE)
    assert removed == 6
    matrix = tmp_path / "selection.toml"
    matrix.write_text(trimmed.replace('expectations = "expectations/selection.toml"\n', ""))

    results = run_matrix(
        matrix, cell_ids=["sm90-auto-noncausal-sink-v2-cubin", "sm90-FLASH_ATTN-noncausal-sink-v1-cubin"]
    )

    for result in results:
        assert result.details.get("backends_not_in_matrix") == ["FLEX_ATTENTION"], result.details
