"""The cpu lane's matrix input: mistakes are one clear line, and the shipped matrix is whole.

No vLLM needed: the lane imports it only when its first cell runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import InputError
from harness.expectations import expectations_for
from harness.lanes.cpu import create
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "cpu.toml"


def write(tmp_path: Path, axes: str, options: str = "") -> Path:
    path = tmp_path / "m.toml"
    path.write_text(f'[matrix]\nname = "m"\nlane = "cpu"\n[axes]\n{axes}\n{options}')
    return path


def test_axis_the_cpu_lane_cannot_vary_is_one_line(tmp_path):
    path = write(tmp_path, 'backend = ["CPU_ATTN"]\ncausal = [true]\nsink = [true]\ncapability = ["9.0"]')
    with pytest.raises(InputError) as error:
        create(load_matrix(path))
    assert error.value.line() == (
        f"{path}: axes.capability: the cpu lane cannot vary this axis "
        "(valid: backend, method, causal, sink, sliding_window, layers, head_size, draft_heads, dtype, "
        "kv_cache_dtype, draft_kv_cache_dtype, target_model, loader, context)"
    )


@pytest.mark.parametrize(
    ("options", "key"),
    [
        ("[options]\nheads = 8", "options.heads"),
        ("[options]\nseed = 1.5", "options.seed"),
        ("[options]\ncontext_lens = []", "options.context_lens"),
        ("[options]\ncontext_lens = [3, -1]", "options.context_lens"),
    ],
)
def test_bad_option_is_one_line(tmp_path, options, key):
    path = write(tmp_path, 'backend = ["CPU_ATTN"]\ncausal = [true]\nsink = [true]', options)
    with pytest.raises(InputError) as error:
        create(load_matrix(path))
    assert error.value.key == key
    assert "\n" not in error.value.line()


def test_shipped_matrix_is_whole():
    matrix = load_matrix(MATRIX)
    cells = expand(matrix)
    # backend 4 x causal 2 x sink 2 x window 3 x dtype 3 x loader 2 on the qwen3 target, the
    # mistral_swa target on backend 4 x causal 2 x sink 2 x loader 2 (full bf16 drafts), then 29
    # cells covering the family's axes pairwise (4 of them for the draft's fp8 KV cache), then the
    # draft's own heads (4/4, 8/2) on every backend request x causal x sink in bf16 and CPU_ATTN's
    # fp16/fp32 non-causal sink cells (32 + 4)
    assert len(cells) == 288 + 32 + 29 + 32 + 4
    assert sum(cell.get("draft_kv_cache_dtype") == "fp8" for cell in cells) == 4
    assert {cell.tolerance for cell in cells} == {matrix.tolerance_for(d) for d in ("bfloat16", "float16", "float32")}
    assert None not in {cell.tolerance for cell in cells}
    expectations = expectations_for(matrix)
    assert expectations.stale_rules(cells) == ()
    create(matrix)  # the lane accepts its own matrix
