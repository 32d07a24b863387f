"""Tiny random-weight checkpoints: a Qwen3 target and DFlash drafts, as safetensors, with the
configs ``harness.deployment.models`` says.

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
from pathlib import Path

import torch
from safetensors.torch import save_file

from harness.deployment.models import (
    DFLASH2_CONFIG,
    DSPARK_MARKOV_RANK,
    DraftSpec,
    DraftTruth,
    ModelShape,
    config_only_target,
    draft_config,
    draft_family,
    target_config,
)

CHECKPOINT_DTYPE = torch.bfloat16
DEFAULT_SHAPE = ModelShape()  # the kernel lanes' (head_dim 32: one CPU_ATTN supports)


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


def write_target(
    root: Path,
    shape: ModelShape = DEFAULT_SHAPE,
    seed: int = 0,
    weights: bool = True,
    family: str = "qwen3",
    dtype: str = "bfloat16",
    head: str = "qwen3",
) -> Path:
    """``dtype`` and ``head`` (harness.axes.TARGET_DTYPES, TARGET_HEADS) are written into a
    config-only target alone: its ``torch_dtype`` and attention geometry, as a real target of that
    dtype and family has them."""
    if not weights:
        # One folder per target: a process may build drafts against several targets.
        parts = ((family, "qwen3"), (dtype, "bfloat16"), (head, "qwen3"))
        name = "-".join(part for part, default in parts if part != default)
        path = root / (f"target-{name}" if name else "target")
        _write(path, config_only_target(shape, family, dtype, head), None)
        return path
    if (dtype, head) != ("bfloat16", "qwen3"):
        raise ValueError("a weighted target is written in bfloat16 with the lane's own shape")
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
    _write(path, target_config(shape, family), tensors)
    return path


def write_draft(
    root: Path, spec: DraftSpec, shape: ModelShape = DEFAULT_SHAPE, seed: int = 1, weights: bool = True
) -> DraftTruth:
    """A draft in ``spec.method``'s own config format and weight names (``weights=False``:
    its config alone; the tensors are still drawn, so a config never depends on the flag)."""
    generator = torch.Generator().manual_seed(seed)
    config = draft_config(spec, shape)
    tensors = {
        "fc.weight": _random(generator, shape.hidden, shape.hidden * shape.target_layers),
        "hidden_norm.weight": _ones(shape.hidden),
        "norm.weight": _ones(shape.hidden),
    }
    family = draft_family(spec.method)
    if weights and spec.method != family:
        # The classes beyond the three families are built from their configs alone (the selection
        # lane, dummy weights); no lane runs their forward pass, so no weights are named for them.
        raise ValueError(f"no weights are written for draft method {spec.method!r}: configs only")
    if family == "dflash2":
        tensors.update(_dflash2_weights(generator, shape))
    elif family == "dspark":
        tensors.update(_dspark_weights(generator, shape))
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
        # Named as llm-compressor names them (``<attention>.k_scale``, beside the projections;
        # the config's kv_cache_scheme: configs.KV_CACHE_QUANTIZATION_CONFIG); vLLM's cache-scale
        # mapper (QuantizationConfig.get_cache_scale_mapper) moves them to ``self_attn.attn.k_scale``.
        for layer in range(shape.draft_layers):
            k_scale, v_scale = _kv_scales(generator)
            tensors[f"layers.{layer}.self_attn.k_scale"] = k_scale
            tensors[f"layers.{layer}.self_attn.v_scale"] = v_scale
            kv_scales.append((float(k_scale.float()), float(v_scale.float())))
    # The head geometry names the folder: two drafts of one spec with other heads (the draft_heads
    # axis) in one process must not overwrite each other's config.
    path = root / f"{spec.dirname}-hd{shape.head_dim}-q{shape.heads}kv{shape.kv_heads}"
    _write(path, config, tensors if weights else None)
    return DraftTruth(
        path=path,
        spec=spec,
        shape=shape,
        sinks=tuple(sinks) if spec.sink and weights else None,
        kv_scales=tuple(kv_scales) if kv_scales and weights else None,
    )


def _dflash2_weights(generator: torch.Generator, shape: ModelShape) -> dict[str, torch.Tensor]:
    taps, groups, rank = (
        DFLASH2_CONFIG["conv_kernel_size"],
        shape.hidden // DFLASH2_CONFIG["conv_group_size"],
        DFLASH2_CONFIG["selector_rank"],
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
        "markov_head.markov_w1.weight": _random(generator, shape.vocab, DSPARK_MARKOV_RANK),
        "markov_head.markov_w2.weight": _random(generator, shape.vocab, DSPARK_MARKOV_RANK),
    }
