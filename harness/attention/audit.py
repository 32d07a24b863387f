"""The effective-settings audit of a draft's attention layers (issue 24).

A DFlash draft's vLLM config is derived from the target's, and every ``Attention.__init__``
reads what its loader did not override from the current (the target's) config: PR #46770 and
the target's ``backend_per_kind`` winning over the draft's request were two such settings. The
audit reads, from each draft attention layer vLLM built, the settings that decide what its
kernels compute and which backends may serve it, and compares each with what the draft asked
for: derived from what the harness wrote (the checkpoint's ``DraftTruth``, the speculative
config's KV-cache dtype and the target's dtype and KV-cache dtype: ``Requested``), never read
back from vLLM.

``asked`` and ``differences`` are pure; ``effective`` reads a vLLM layer object (duck-typed, no
import). A setting a release does not expose on its layer object is recorded as not audited,
never as a difference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.deployment.models import DraftTruth

# The settings audited, in the order a difference is reported: each with why it matters.
SETTINGS: Mapping[str, str] = {
    "head_size": "the kernels' head dimension (the draft's head_dim)",
    "num_heads": "the draft's query heads (its num_attention_heads, not the target's)",
    "num_kv_heads": "the draft's KV heads (its num_key_value_heads: with num_heads, its GQA layout)",
    "sliding_window": "the layer's window; None = full attention (a target's model-level window must not reach it)",
    "kv_cache_spec_window": "the window of the KV-cache spec the layer reports (decides its KV-cache group)",
    "sinks": "whether the layer carries attention-sink logits",
    "scale": "the softmax scale (head_dim ** -0.5 for a DFlash draft)",
    "causal": "the causal flag the layer's metadata gets from its runner",
    "dtype": "the layer's dtype: the target's by design (the draft checkpoint's torch_dtype is not used)",
    "kv_cache_dtype": "the draft's KV-cache dtype (speculative_config.kv_cache_dtype, else the target's)",
    "kv_cache_torch_dtype": (
        "the KV cache's element type: unset = the target's resolved one, auto = the draft's model dtype, "
        "else the one the draft names"
    ),
    "mm_prefix": "prefix-LM bidirectional attention (a multimodal target's flag; a DFlash draft is text-only)",
    "k_scale": "the layer's fp8 key-cache scale: the one written for this layer, else 1.0 (not another layer's)",
    "v_scale": "the layer's fp8 value-cache scale: the one written for this layer, else 1.0",
    "q_scale": "the fp8 query scale: none is written, so vLLM's default (1.0, DraftTruth.layer_q_scale)",
    "flash_attn_version": (
        "the FlashAttention version a FLASH_ATTN layer runs: the platform's for the draft's own settings "
        "(the engine forces 2 for a TurboQuant/UltraQuant target, engine/arg_utils.py)"
    ),
}
# The layer's scales as its kernels read them: CUDA/Triton kernels the device tensors
# (``_k_scale``), CPU_ATTN and AITER the host floats (``_k_scale_float``); vLLM keeps both.
_SCALES = {
    "k_scale": ("_k_scale", "_k_scale_float"),
    "v_scale": ("_v_scale", "_v_scale_float"),
    "q_scale": ("_q_scale", "_q_scale_float"),
}
NOT_EXPOSED = "not exposed by this vLLM release's layer"


@dataclass(frozen=True)
class SettingDifference:
    layer: str
    setting: str
    asked: Any
    got: Any

    def __str__(self) -> str:
        return f"{self.layer}: {self.setting} is {_text(self.got)}, the draft asked for {_text(self.asked)}"


def _text(value: Any) -> str:
    return "none" if value is None else str(value)


# The element type a KV cache of each dtype the matrices name is stored in, as torch prints it
# (vLLM's STR_DTYPE_TO_TORCH_DTYPE, vllm/utils/torch_utils.py:40-66 at 0.33.0, :41-67 at 0.34.0):
# every fp8 variant and every packed quantized cache as bytes (uint8, the string says which
# format), int8 per-token-head scales as int8, Intel's fp8_inc as a real float8, and "auto" in
# the model's dtype.
_KV_ELEMENT_TYPES = {
    "bfloat16": "torch.bfloat16",
    "float16": "torch.float16",
    "float32": "torch.float32",
    "fp8": "torch.uint8",
    "fp8_e4m3": "torch.uint8",
    "fp8_e5m2": "torch.uint8",
    "fp8_inc": "torch.float8_e4m3fn",
    "fp8_ds_mla": "torch.uint8",
    "nvfp4_ds_mla": "torch.uint8",
    "turboquant_k8v4": "torch.uint8",
    "turboquant_4bit_nc": "torch.uint8",
    "turboquant_k3v4_nc": "torch.uint8",
    "turboquant_3bit_nc": "torch.uint8",
    "octave_k3v4": "torch.uint8",
    "octave_k3v3": "torch.uint8",
    "octave_k3v3_compact": "torch.uint8",
    "ultraquant_4bit": "torch.uint8",
    "int4_per_token_head": "torch.uint8",
    "int8_per_token_head": "torch.int8",
    "fp8_per_token_head": "torch.uint8",
    "nvfp4": "torch.uint8",
    "nvfp4_4over6": "torch.uint8",
}


@dataclass(frozen=True)
class Requested:
    """What the harness wrote into the engine arguments that reaches a draft layer's dtypes.

    draft_kv_cache_dtype: speculative_config.kv_cache_dtype, None when the harness left it unset.
    target_kv_cache_dtype: the engine's (the target's) --kv-cache-dtype.
    target_dtype: the target's --dtype, which is the draft's model dtype by design.
    flash_attn_version: see the field.
    """

    draft_kv_cache_dtype: str | None
    target_kv_cache_dtype: str
    target_dtype: str
    # The FlashAttention version the platform gives a layer with the draft's own settings under a
    # config that forces none (vLLM's get_flash_attn_version); None where the lane does not ask it,
    # and then the setting is listed as not audited.
    flash_attn_version: int | None = None

    @property
    def kv_cache_dtype(self) -> str:
        """The layer's cache-dtype string: the draft's own when set, else the target's."""
        return self.target_kv_cache_dtype if self.draft_kv_cache_dtype is None else self.draft_kv_cache_dtype

    @property
    def kv_cache_torch_dtype(self) -> str:
        """By design (dflash/utils.py, speculative.py's override list "only when set"): unset
        inherits the target's resolved KV dtype; an explicit "auto" is the draft's model dtype
        (the target's dtype, by design); any other value is itself."""
        if self.draft_kv_cache_dtype is None:
            return _element_type(self.target_kv_cache_dtype, self.target_dtype)
        return _element_type(self.draft_kv_cache_dtype, self.target_dtype)


def _element_type(cache_dtype: str, model_dtype: str) -> str:
    return _KV_ELEMENT_TYPES[model_dtype if cache_dtype == "auto" else cache_dtype]


def asked(truth: DraftTruth, requested: Requested) -> tuple[dict[str, Any], ...]:
    """What each draft layer asked for, from the checkpoint and engine arguments the harness wrote."""
    shape = truth.shape
    return tuple(
        {
            "head_size": shape.head_dim,
            "num_heads": shape.heads,
            "num_kv_heads": shape.kv_heads,
            "sliding_window": truth.layer_window(index) or None,
            "kv_cache_spec_window": truth.layer_window(index) or None,
            "sinks": truth.spec.sink,  # every layer of a sink draft carries them (checkpoint.write_draft)
            "scale": truth.scale,
            "causal": truth.layer_causal(index),
            "dtype": _KV_ELEMENT_TYPES[requested.target_dtype],
            "kv_cache_dtype": requested.kv_cache_dtype,
            "kv_cache_torch_dtype": requested.kv_cache_torch_dtype,
            "mm_prefix": False,
            "k_scale": truth.layer_kv_scales(index)[0],
            "v_scale": truth.layer_kv_scales(index)[1],
            "q_scale": truth.layer_q_scale(index),
            "flash_attn_version": requested.flash_attn_version,
        }
        for index in range(shape.draft_layers)
    )


def effective(attn: Any, vllm_config: Any, causal: bool | None) -> dict[str, Any]:
    """What one vLLM attention layer carries; ``causal`` is the flag its runner gives its metadata
    (None: this lane does not know it). Settings the release does not expose are left out."""
    settings: dict[str, Any] = {}
    for name, attribute in (
        ("head_size", "head_size"),
        ("num_heads", "num_heads"),
        ("num_kv_heads", "num_kv_heads"),
        ("sliding_window", "sliding_window"),
        ("dtype", "dtype"),
        ("kv_cache_dtype", "kv_cache_dtype"),
        ("kv_cache_torch_dtype", "kv_cache_torch_dtype"),
        ("mm_prefix", "use_mm_prefix"),
        ("sinks", "has_sink"),
    ):
        if hasattr(attn, attribute):
            settings[name] = getattr(attn, attribute)
    for name in ("dtype", "kv_cache_dtype", "kv_cache_torch_dtype"):  # torch dtypes as torch prints them
        if name in settings:
            settings[name] = str(settings[name])
    for name, (device, host) in _SCALES.items():
        if hasattr(attn, device) and hasattr(attn, host):
            settings[name] = _scale(float(getattr(attn, device)), float(getattr(attn, host)))
    impl: Any = getattr(attn, "impl", None)
    scale = getattr(impl, "scale", None)
    if scale is not None:
        settings["scale"] = float(scale)
    # FlashAttention's own impl only: its subclasses and siblings pick versions by other rules.
    if type(impl).__name__ == "FlashAttentionImpl" and hasattr(impl, "vllm_flash_attn_version"):
        settings["flash_attn_version"] = impl.vllm_flash_attn_version
    if causal is not None:
        settings["causal"] = causal
    get_spec = getattr(attn, "get_kv_cache_spec", None)
    if get_spec is not None and vllm_config is not None:
        try:
            spec = get_spec(vllm_config)
        except Exception as error:  # an older signature, a backend's own check: recorded, never a verdict
            settings["kv_cache_spec"] = f"not read: {type(error).__name__}: {error}"
        else:
            settings["kv_cache_spec"] = type(spec).__name__
            settings["kv_cache_spec_window"] = getattr(spec, "sliding_window", None)
    return settings


def _scale(device: float, host: float) -> float | str:
    # Two copies that disagree are a difference whatever was asked: text never equals a number.
    return device if device == host else f"{device} on the device, {host} on the host"


def _same(setting: str, want: Any, got: Any) -> bool:
    if setting == "scale":
        return math.isclose(float(want), float(got), rel_tol=1e-6)
    if setting in _SCALES:
        # Written in bf16 and loaded exactly into fp32: equal, not close.
        return isinstance(got, float) and got == float(want)
    return bool(want == got)


def differences(
    names: Sequence[str], wanted: Sequence[Mapping[str, Any]], got: Sequence[Mapping[str, Any]]
) -> tuple[SettingDifference, ...]:
    """Every audited setting a layer carries other than asked, layer by layer in SETTINGS order."""
    found = []
    for name, want, have in zip(names, wanted, got, strict=True):
        for setting in SETTINGS:
            if setting in _JUDGED_WHEN_KNOWN and want[setting] is None:
                continue  # not known to this lane: unaudited() lists it
            if setting in have and not _same(setting, want[setting], have[setting]):
                found.append(SettingDifference(name, setting, want[setting], have[setting]))
    return tuple(found)


# Settings whose asked value only some lanes know (None elsewhere): compared only where known.
_JUDGED_WHEN_KNOWN = frozenset({"flash_attn_version"})


def unaudited(got: Sequence[Mapping[str, Any]], wanted: Sequence[Mapping[str, Any]] = ()) -> list[str]:
    """The settings no layer exposed, or that a layer exposed but the lane could not judge (the
    cell's details say so, instead of a silent pass)."""
    unknown = {s for s in _JUDGED_WHEN_KNOWN for want in wanted if want.get(s) is None}
    return [
        setting
        for setting in SETTINGS
        if not any(setting in layer for layer in got) or (setting in unknown and any(setting in layer for layer in got))
    ]
