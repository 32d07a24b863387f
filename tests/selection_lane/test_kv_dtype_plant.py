"""The audit catches an engine setting forced on every draft layer because of the target's KV
dtype: a loader that gives the draft the target's packed (TurboQuant) cache over the draft's own
speculative_config.kv_cache_dtype changes exactly the cells whose draft asked for another cache
behind such a target, and none behind a target with any other cache, nor a draft that asked for
nothing (it inherits the target's cache by design) or for the target's own."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import seam_plants
from .pre_fix import BEFORE_FIX, VLLM
from .slices import plant_slice_cells

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(BEFORE_FIX, reason=f"vLLM {VLLM} has no speculative kv_cache_dtype to lose"),
]

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
# The target caches of the kv_cache_dtype blocks the plant reads: two packed, one not (the control).
TARGET_CACHES = ("turboquant_k8v4", "turboquant_3bit_nc", "int8_per_token_head")


def _planted(axes: Mapping[str, Any]) -> bool:
    """The cells the plant may change: the draft set its own cache, another than the target's packed one."""
    own, target = axes["draft_kv_cache_dtype"], axes["kv_cache_dtype"]
    return target.startswith(seam_plants.PACKED_KV_PREFIXES) and own not in ("target", target)


def test_the_targets_packed_cache_forced_on_the_draft_changes_exactly_the_cells_whose_draft_asked_for_another() -> None:
    cells = [
        c.id
        for c in plant_slice_cells()
        if c.values["capability"] in ("9.0", "10.0") and c.values.get("kv_cache_dtype") in TARGET_CACHES
    ]
    results = run_matrix(MATRIX, plants=[f"{seam_plants.__name__}:target_packed_kv_forced_on_draft"], cell_ids=cells)
    assert len(results) == len(cells)
    # Not as expected (verdict, or the message the rule asks for): the expectations are the unplanted run's.
    changed = {r.id: r for r in results if not r.ok}
    should = {r.id for r in results if _planted(r.axes) and r.expected == Verdict.PASS}
    assert not {i for i, r in changed.items() if not _planted(r.axes)}, sorted(changed)
    assert should and should <= set(changed), sorted(should - set(changed))
    for result in (changed[i] for i in should):
        own, target = result.axes["draft_kv_cache_dtype"], result.axes["kv_cache_dtype"]
        if result.verdict in (Verdict.WRONG_SETTING, Verdict.WRONG_BACKEND):
            # The draft built: its layers carry the target's cache, named with both values.
            assert f"kv_cache_dtype is {target}, the draft asked for {own}" in result.message, result.message
            continue
        # A non-causal draft handed a TurboQuant cache has no backend: the loader's selection
        # refuses what the platform accepted for the draft's own cache.
        assert result.verdict == Verdict.CRASH, (result.id, result.verdict, result.message)
        assert "kv_cache_dtype not supported" in result.message or target in result.message, result.message
    # The controls pass as unplanted: a draft that inherits the target's cache, and every draft
    # behind the per-token-head target.
    assert any(r.ok and r.axes["draft_kv_cache_dtype"] == "target" for r in results)
    assert any(
        r.ok and r.axes["kv_cache_dtype"] == "int8_per_token_head" and r.axes["draft_kv_cache_dtype"] == "fp8"
        for r in results
    )
