"""Plants for isolation (docs/explanation/isolation.md): a selector memo that carries one cell's
answer into the next, and a cell process that skips its per-cell reset."""

from __future__ import annotations

import functools
from typing import Any

from harness.lanes.selection import SelectionLane

_CELL_WIDE = {"dtype": None, "use_mm_prefix": None, "has_sliding_window": None, "block_size": None}


def carry_selector_answers(lane: SelectionLane) -> None:
    """vLLM's selector memo keyed without the selector inputs every layer of a cell shares (the
    target's dtype, which the draft takes by design; the target's prefix-LM flag and window, which
    reach the draft's layers too; the cell's block size): a cell alone never sees the difference,
    a later cell behind another target gets an earlier cell's answer. The memo is a module-level
    functools cache, like vLLM's own, so the cell process's reset clears it."""
    lane.after_install(_install_carry)


def _install_carry() -> None:
    from vllm.v1.attention import selector

    uncached = selector._cached_get_attn_backend.__wrapped__
    current: dict[str, Any] = {}

    @functools.cache
    def remembered(backend: Any, cell_free_config: Any, num_heads: Any, run_kv_cache_dtype: Any) -> Any:
        return uncached(backend, current["config"], num_heads, _run_kv_cache_dtype=run_kv_cache_dtype)

    def carried(
        backend: Any, attn_selector_config: Any, num_heads: Any = None, *, _run_kv_cache_dtype: Any = None
    ) -> Any:
        current["config"] = attn_selector_config
        return remembered(backend, attn_selector_config._replace(**_CELL_WIDE), num_heads, _run_kv_cache_dtype)

    selector._carried_selector_memo = remembered
    selector._cached_get_attn_backend = carried


def no_reset(lane: SelectionLane) -> None:
    """The cell process skips its per-cell reset (the child looks the lane's reset up per cell)."""
    import harness.cell_process

    harness.cell_process.reset_vllm_caches = lambda: None
