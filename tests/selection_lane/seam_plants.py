"""Faults planted at the target/draft seam of the selection lane's vLLM: the draft takes a
setting from the target's config where vLLM's loader overrides it today, or its metadata is
built for another KV-cache layout than the runner gave it. The audit
(``harness.attention.audit``, ``harness.attention.kv_cache``) must name each in exactly the
cells whose draft asked for something else than the target has.
"""

from __future__ import annotations

import functools
from typing import Any

from harness.lanes.selection import SelectionLane

from .kernel_blocks import install_default_blocks
from .pre_fix import rebuild_replacing, rebuild_without

# load_dflash_model's cache_config replacement: the draft's own speculative_config.kv_cache_dtype.
CACHE_DTYPE_LINE = "cache_dtype=speculative_config.kv_cache_dtype,"
# ... made only "when set" (vLLM's _DRAFT_VLLM_CONFIG_OVERRIDES): None is unset, "auto" is set.
WHEN_SET_LINE = "if speculative_config.kv_cache_dtype is not None"
# The draft's model config, which carries the target's dtype (SpeculativeConfig, by design).
DRAFT_MODEL_CONFIG_LINE = "draft_model_config = speculative_config.draft_model_config"


def keep_target_cache_dtype(lane: SelectionLane) -> None:
    """Runner plant: Model Runner V2's DFlash loader (dflash, dflash2) without the line that gives
    the draft its own KV-cache dtype, so its layers take the target's."""
    lane.after_install(_install)


def _install() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    rebuild_without(loader_module, "load_dflash_model", CACHE_DTYPE_LINE)


def explicit_auto_kv_is_unset(lane: SelectionLane) -> None:
    """Runner plant: load_dflash_model treats an explicit draft kv_cache_dtype "auto" as unset, so
    the draft's layers take the target's cache dtype instead of the draft's model dtype."""
    lane.after_install(_install_auto_as_unset)


def _install_auto_as_unset() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    rebuild_replacing(
        loader_module, "load_dflash_model", WHEN_SET_LINE, 'if speculative_config.kv_cache_dtype not in (None, "auto")'
    )


def draft_keeps_checkpoint_dtype(lane: SelectionLane) -> None:
    """Runner plant: load_dflash_model builds the draft in its checkpoint's torch_dtype rather
    than the target's dtype its model config carries (the draft drops the target's value)."""
    lane.after_install(_install_checkpoint_dtype)


def _checkpoint_dtype(model_config: Any) -> Any:
    import copy

    import torch

    written = model_config.hf_config.to_dict()
    own = copy.copy(model_config)
    own.dtype = getattr(torch, str(written.get("dtype") or written["torch_dtype"]).removeprefix("torch."))
    return own


def _install_checkpoint_dtype() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    rebuild_replacing(
        loader_module,
        "load_dflash_model",
        DRAFT_MODEL_CONFIG_LINE,
        "draft_model_config = _checkpoint_dtype(speculative_config.draft_model_config)",
        {"_checkpoint_dtype": _checkpoint_dtype},
    )


def speculator_on_default_blocks(lane: SelectionLane) -> None:
    """Runner plant: Model Runner V2's draft-only ``init_attn_backend`` (the speculator's call,
    the one with ``active_layer_names``) builds the draft's metadata for 16-token kernel blocks
    whatever the user's --block-size, while the runner keeps laying the cache out in its own:
    the two disagree exactly where --block-size is set (and not 16). A group the plant left
    marked split would make init_kv_cache refuse the runner's view (a crash, another fault)."""
    lane.after_install(install_default_blocks)


def speculator_on_runner_blocks(lane: SelectionLane) -> None:
    """Runner plant, the other way: the speculator's draft-only ``init_attn_backend`` builds the
    draft's metadata for the kernel block sizes the runner computes over every layer (what a
    fix of docs/explanation/target-draft-seam.md 2.4 would do), so the two always agree."""
    lane.after_install(_install_runner_blocks)


def _install_runner_blocks() -> None:
    import vllm.v1.worker.gpu.attn_utils as attn_utils

    init_attn_backend = attn_utils.init_attn_backend

    # wraps: the layout asks init_attn_backend's signature which parameters it takes.
    @functools.wraps(init_attn_backend)
    def planted(kv_cache_config: Any, vllm_config: Any, device: Any, *args: Any, **kwargs: Any) -> Any:
        groups, support, kernel_block_sizes = init_attn_backend(kv_cache_config, vllm_config, device, *args, **kwargs)
        if kwargs.get("active_layer_names") is not None:
            _, _, runner_sizes = init_attn_backend(kv_cache_config, vllm_config, device)
            for group in (g for per_group in groups for g in per_group):
                group.kernel_block_size = None
                group.create_metadata_builders(
                    vllm_config, device, kernel_block_size=runner_sizes[group.kv_cache_group_id]
                )
        return groups, support, kernel_block_sizes

    attn_utils.init_attn_backend = planted


# What the planted builder gate says (tests/selection_lane/test_startup_plant.py looks for it).
TARGET_HEADS_GATE = "planted: TRITON_ATTN's metadata builder is sized for the target's"


def triton_builder_reads_target_heads(lane: SelectionLane) -> None:
    """Runner plant at the engine's start-up: TRITON_ATTN's metadata builder refuses a KV-cache
    spec whose KV heads differ from the current model config's, the target's (as vLLM 0.33.0's
    builder sizes its split-KV scratch from them: target-draft-seam.md, 2.5). Builders exist only
    from the start-up on (init_attn_backend, V1's initialize_attn_backend), so it stops exactly the
    cells whose draft layers run TRITON_ATTN behind a target with other KV heads, at stage startup."""
    lane.after_install(_install_target_heads_gate)


def _install_target_heads_gate() -> None:
    from vllm.v1.attention.backends.triton_attn import TritonAttentionMetadataBuilder

    init = TritonAttentionMetadataBuilder.__init__

    @functools.wraps(init)
    def planted(self: Any, kv_cache_spec: Any, layer_names: Any, vllm_config: Any, *args: Any, **kwargs: Any) -> None:
        init(self, kv_cache_spec, layer_names, vllm_config, *args, **kwargs)
        target = vllm_config.model_config.get_num_kv_heads(vllm_config.parallel_config)
        if kv_cache_spec.num_kv_heads != target:
            heads = kv_cache_spec.num_kv_heads
            raise ValueError(f"{TARGET_HEADS_GATE} {target} KV heads; {layer_names[0]} has {heads}")

    TritonAttentionMetadataBuilder.__init__ = planted


def draft_takes_target_heads(lane: SelectionLane) -> None:
    """Layer plant (issue 38): every attention layer takes its query and KV heads from the current
    config's model, as builders and gates that read ``model_config.get_num_attention_heads`` /
    ``get_num_kv_heads`` do (FlashInfer's kernel-block and query-length gates, FLEX_ATTENTION's
    and 0.33.0 TRITON_ATTN's builders): a draft's loader builds it under the target's model
    config, so a draft layer carries the target's heads exactly where they differ from its own."""
    # The kernel lanes' plant, one definition (tests/cpu_lane/plants.py; gpu-emulated calls it too).
    from cpu_lane.plants import install_target_heads

    lane.after_install(install_target_heads)


# The engine's packed KV caches (engine/arg_utils.py: TurboQuant and UltraQuant, for which it also
# keeps boundary layers unquantized and forces FlashAttention 2).
PACKED_KV_PREFIXES = ("turboquant_", "ultraquant_")


def _packed_target_wins(target: str, own: str | None) -> str | None:
    return target if target.startswith(PACKED_KV_PREFIXES) else own


def target_packed_kv_forced_on_draft(lane: SelectionLane) -> None:
    """Runner plant: an engine setting forced on every layer, tied to the target's KV dtype.
    load_dflash_model gives the draft the target's cache dtype whenever the target's is a packed
    TurboQuant/UltraQuant cache, over the draft's own speculative_config.kv_cache_dtype (as a
    rule "the packed cache is the engine's" would); behind any other target the draft's own wins."""
    lane.after_install(_install_packed_target_wins)


def _install_packed_target_wins() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    rebuild_replacing(
        loader_module,
        "load_dflash_model",
        CACHE_DTYPE_LINE,
        "cache_dtype=_packed_target_wins(vllm_config.cache_config.cache_dtype, speculative_config.kv_cache_dtype),",
        {"_packed_target_wins": _packed_target_wins},
    )


# Whether FlashAttention runs batch-invariant (FlashAttentionImpl.__init__ reads the engine's
# VLLM_BATCH_INVARIANT): an attribute of the impl no named audit lists. (The FlashAttention
# version, the first choice, is a named setting since the audit reads it: target-packed-kv-forces-fa2-on-draft.)
UNLISTED_IMPL_ATTRIBUTE = "batch_invariant_enabled"


def force_batch_invariance(lane: SelectionLane) -> None:
    """Runner plant: Model Runner V2's DFlash loader (dflash, dflash2) turns batch invariance the
    other way on every draft layer built on ``FlashAttentionImpl``, as a mode forced from the
    target's engine would: only the provenance audit reads that attribute."""
    lane.after_install(_install_batch_invariance)


def _install_batch_invariance() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    load_dflash_model = loader_module.load_dflash_model

    @functools.wraps(load_dflash_model)
    def planted(target_model: Any, vllm_config: Any) -> Any:
        model = load_dflash_model(target_model, vllm_config)
        for module in model.modules():
            impl = getattr(module, "impl", None)
            if type(impl).__name__ == "FlashAttentionImpl":
                setattr(impl, UNLISTED_IMPL_ATTRIBUTE, not getattr(impl, UNLISTED_IMPL_ATTRIBUTE))
        return model

    loader_module.load_dflash_model = planted
