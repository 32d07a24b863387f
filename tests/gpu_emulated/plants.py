"""Faults planted into vLLM inside a gpu-emulated cell process (``run_matrix(plants=...)``).

Each is ``function(lane)``, called after the lane is created; each patches vLLM only once the
lane's host has installed the simulated platform (``EmulatedHost.after_start``), since importing
vLLM any earlier would resolve the platform. They patch vLLM, never the harness.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from cpu_lane.plants import install_target_heads


def _after_start(lane: Any, hook: Callable[[], None]) -> None:
    lane.host.after_start(hook)


def drop_sinks_into_kernel(lane: Any) -> None:
    """TRITON_ATTN's forward hands the unified-attention kernel no sinks."""

    def plant() -> None:
        import vllm.v1.attention.backends.triton_attn as triton_attn

        kernel_call = triton_attn.unified_attention

        @functools.wraps(kernel_call)
        def without_sinks(*args: Any, **kwargs: Any) -> Any:
            kwargs["sinks"] = None
            return kernel_call(*args, **kwargs)

        triton_attn.unified_attention = without_sinks

    _after_start(lane, plant)


def _wrap_build(change: Callable[[Any], None]) -> None:
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadataBuilder

    build = TritonAttentionMetadataBuilder.build

    @functools.wraps(build)
    def planted(self: Any, *args: Any, **kwargs: Any) -> Any:
        metadata = build(self, *args, **kwargs)
        change(metadata)
        return metadata

    TritonAttentionMetadataBuilder.build = planted


def lose_non_causal(lane: Any) -> None:
    """TRITON_ATTN's metadata builder drops the draft's non-causal flag."""

    def set_causal(metadata: Any) -> None:
        metadata.causal = True

    _after_start(lane, lambda: _wrap_build(set_causal))


def reallocate_seq_lens(lane: Any) -> None:
    """TRITON_ATTN's builder hands out a fresh copy of seq_lens on each build instead of the
    persistent buffer: right in an eager forward, stale in every replay of a captured graph
    (which keeps reading the copy made at capture)."""

    def copy_seq_lens(metadata: Any) -> None:
        metadata.seq_lens = metadata.seq_lens.clone()

    _after_start(lane, lambda: _wrap_build(copy_seq_lens))


def lose_request_in_loader(lane: Any) -> None:
    """Model Runner V2's DFlash loader as before vLLM PR #46770 (the draft's backend request
    never reaches its layers): the selection lane's plant, on this lane's host."""
    from selection_lane.pre_fix import install_pre_fix_loader

    _after_start(lane, install_pre_fix_loader)


def widen_hybrid_sliding_window(lane: Any) -> None:
    """The DFlash model resolves a hybrid draft's sliding layers with a window one token wider
    than the config's (``qwen3_dflash._resolve_layer_attention``); uniform drafts, whose layers
    all follow ``use_swa``, and full layers keep theirs: a bug of one layer kind, in the path only
    hybrid drafts take."""

    def plant() -> None:
        from vllm.model_executor.models import qwen3_dflash

        resolve = qwen3_dflash._resolve_layer_attention

        @functools.wraps(resolve)
        def wider(config: Any, layer_idx: int) -> tuple[int | None, bool]:
            window, causal = resolve(config, layer_idx)
            types = getattr(config, "layer_types", None) or ()
            hybrid = len(set(types)) > 1
            return (window + 1 if hybrid and window else window), causal

        qwen3_dflash._resolve_layer_attention = wider

    _after_start(lane, plant)


def nudge_scale_in_v2_loader(lane: Any) -> None:
    """The cpu lane's plant (a V2 DFlash loader whose draft is off by a softmax scale of 2**-16),
    applied once the simulated platform is in place."""
    from cpu_lane import plants as cpu_plants

    _after_start(lane, lambda: cpu_plants.nudge_scale_in_v2_loader(lane))


def softmax_scale_two_percent_off(lane: Any) -> None:
    """TRITON_ATTN's forward hands the kernel a softmax scale 2% too large: the layer carries the
    right scale (the audit sees nothing), the kernel computes with a wrong one, in every cell."""

    def plant() -> None:
        import vllm.v1.attention.backends.triton_attn as triton_attn

        kernel_call = triton_attn.unified_attention

        @functools.wraps(kernel_call)
        def skewed(*args: Any, **kwargs: Any) -> Any:
            kwargs["softmax_scale"] *= 1.02
            return kernel_call(*args, **kwargs)

        triton_attn.unified_attention = skewed

    _after_start(lane, plant)


def every_layer_loads_layer_zero_kv_scales(lane: Any) -> None:
    """A DFlash loader that gives every draft layer the first layer's k/v scales (the checkpoint's
    names mapped to the wrong layer): a draft without scales is unchanged."""

    def plant() -> None:
        import re

        from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM

        load_weights = DFlashQwen3ForCausalLM.load_weights
        scale_name = re.compile(r"^layers\.\d+\.(self_attn\.[kv]_scale)$")

        @functools.wraps(load_weights)
        def layer_zero(self: Any, weights: Any) -> Any:
            weights = list(weights)
            first = {
                m.group(1): w for name, w in weights if (m := scale_name.match(name)) and name.startswith("layers.0.")
            }
            return load_weights(self, [(n, first[m.group(1)] if (m := scale_name.match(n)) else w) for n, w in weights])

        DFlashQwen3ForCausalLM.load_weights = layer_zero

    _after_start(lane, plant)


def kernel_descales_keys_by_one(lane: Any) -> None:
    """TRITON_ATTN's forward hands the kernel a key descale of 1.0 instead of the layer's k_scale:
    the layer carries its scale (the audit sees nothing); only an fp8 cache is descaled."""

    def plant() -> None:
        import torch
        import vllm.v1.attention.backends.triton_attn as triton_attn

        kernel_call = triton_attn.unified_attention

        @functools.wraps(kernel_call)
        def undescaled(*args: Any, **kwargs: Any) -> Any:
            kwargs["k_descale"] = torch.ones_like(kwargs["k_descale"])
            return kernel_call(*args, **kwargs)

        triton_attn.unified_attention = undescaled

    _after_start(lane, plant)


def speculator_on_default_blocks(lane: Any) -> None:
    """Model Runner V2's speculator builds the draft's metadata for 16-token kernel blocks
    whatever --block-size says (the selection lane's plant, ``selection_lane.kernel_blocks``),
    while the runner lays the shared group's cache out in its own: the draft's layers run
    against a view their metadata was not built for."""
    from selection_lane.kernel_blocks import install_default_blocks

    _after_start(lane, install_default_blocks)


def draft_takes_target_heads(lane: Any) -> None:
    """Draft attention layers built with the target's query and KV heads (issue 38's draft_heads
    plant, the cpu lane's own), once the simulated platform is installed."""
    _after_start(lane, install_target_heads)


# An attribute of TRITON_ATTN's impl that no named audit reads and these drafts' kernels never
# use: unified_attention reads use_alibi_sqrt only under ALiBi slopes (vLLM 0.33.0
# triton_attn.py:551, :709; 0.34.0 :554, :712), which no DFlash draft has. Flipped, no number
# changes: only the provenance audit can see it.
UNLISTED_IMPL_ATTRIBUTE = "use_alibi_sqrt"


def flip_unlisted_impl_attribute_in_v2_loader(lane: Any) -> None:
    """Model Runner V2's DFlash loader turns TRITON_ATTN's ``use_alibi_sqrt`` the other way on
    every draft layer (the cpu lane's provenance plant, on the interpreted Triton impl)."""
    from cpu_lane import plants as cpu_plants

    _after_start(
        lane,
        lambda: cpu_plants.flip_impl_attribute_in_v2_loader("TritonAttentionImpl", UNLISTED_IMPL_ATTRIBUTE),
    )


def refuse_layout_for_sink_drafts(lane: Any) -> None:
    """The engine core's KV-cache planning refuses the layout of every deployment whose DFlash
    draft has attention sinks, in vLLM's own words for a layout no backend set serves
    (``get_supported_kv_cache_layouts``): the kernel lanes' start-up stage must stop exactly those
    cells there, before any kernel runs."""

    def plant() -> None:
        from harness.attention.rejections import NO_COMMON_LAYOUT

        try:
            import vllm.v1.core.kv_cache_planning as planning
        except ImportError:  # before 0.33.0 the planning lived in kv_cache_utils
            import vllm.v1.core.kv_cache_utils as planning

        get_kv_cache_configs = planning.get_kv_cache_configs

        @functools.wraps(get_kv_cache_configs)
        def refusing(vllm_config: Any, *args: Any, **kwargs: Any) -> Any:
            draft = vllm_config.speculative_config.draft_model_config.hf_config
            if (getattr(draft, "dflash_config", None) or {}).get("attention_sink_bias"):
                raise ValueError(f"{NO_COMMON_LAYOUT}: planted for a draft with attention sinks")
            return get_kv_cache_configs(vllm_config, *args, **kwargs)

        planning.get_kv_cache_configs = refusing

    _after_start(lane, plant)
