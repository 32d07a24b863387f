"""Faults planted at the target/draft seam of the selection lane's vLLM: the draft takes a
setting from the target's config where vLLM's loader overrides it today. The audit
(``harness.attention.audit``) must name each in exactly the cells whose draft asked for
something else than the target has.
"""

from __future__ import annotations

from harness.lanes.selection import SelectionLane

from .pre_fix import rebuild_without

# load_dflash_model's cache_config replacement: the draft's own speculative_config.kv_cache_dtype.
CACHE_DTYPE_LINE = "cache_dtype=speculative_config.kv_cache_dtype,"


def keep_target_cache_dtype(lane: SelectionLane) -> None:
    """Runner plant: Model Runner V2's DFlash loader (dflash, dflash2) without the line that gives
    the draft its own KV-cache dtype, so its layers take the target's."""
    lane.after_install(_install)


def _install() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    rebuild_without(loader_module, "load_dflash_model", CACHE_DTYPE_LINE)
