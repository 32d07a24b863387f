"""The axes a matrix may vary, the values each accepts, and how a value reads in a cell id.

A cell id is built from per-axis tokens in this module's fixed axis order. A token
depends only on the axis and the cell's own value, never on which other values the
matrix lists, so adding a value anywhere never renames an existing cell.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

AxisValue = str | int | bool

AUTO_BACKEND = "auto"
_BACKEND_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_CAPABILITY = re.compile(r"^(\d{1,2})\.(\d)$")

DTYPE_TOKENS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
# Every value of vLLM's CacheDType (vllm/config/cache.py), the union over the releases the lanes
# run (0.33.0 and 0.34.0 list the same 22): the target's --kv-cache-dtype may be any of them, and
# the engine changes other settings for some (TurboQuant and UltraQuant: boundary layers kept
# unquantized, FlashAttention 2 forced; docs/explanation/target-draft-seam.md, 2.11). A release
# whose CacheDType lacks a value makes its cells unavailable (harness/attention/apis.py);
# tests/selection_lane/test_kv_cache_dtype_coverage.py fails when the installed release lists
# one this tuple does not.
KV_CACHE_DTYPES = (
    "auto",
    "float16",
    "bfloat16",
    "fp8",
    "fp8_e4m3",
    "fp8_e5m2",
    "fp8_inc",
    "fp8_ds_mla",
    "nvfp4_ds_mla",
    "turboquant_k8v4",
    "turboquant_4bit_nc",
    "turboquant_k3v4_nc",
    "turboquant_3bit_nc",
    "octave_k3v4",
    "octave_k3v3",
    "octave_k3v3_compact",
    "ultraquant_4bit",
    "int4_per_token_head",
    "int8_per_token_head",
    "fp8_per_token_head",
    "nvfp4",
    "nvfp4_4over6",
)
LOADERS = ("v1", "v2")
CUDAGRAPH_MODES = ("eager", "graph")
# The DFlash family: the draft's architecture and config format. dflash = DFlashDraftModel,
# dflash2 = DFlash2DraftModel (method "dflash" in vLLM, its own V2 speculator), dspark =
# Qwen3DSparkModel (method "dspark", its own V2 loader ``load_dspark_model``); then one value per
# other draft model class vLLM 0.34.0 registers for dflash and dspark (issue 38), each served under
# its family's method and loader (harness/deployment/models.py DRAFT_MODELS, keyed by these).
METHODS = (
    "dflash",
    "dflash2",
    "dspark",
    "dflash2_beam",
    "dflash2_ricursive",
    "qwen3_xpress",
    "dflash_laguna",
    "dflash_lilicorr",
    "dspark_deepseek_v4",
    "dspark_minimax_m3",
    "dspark_k3",
    "dspark_muse_spark",
    "dspark_mistral_large4",
    "dspark_gemma4",
)
# speculative_config.kv_cache_dtype; "target" = unset, the draft shares the target's cache dtype.
DRAFT_KV_CACHE_DTYPES = ("target", *KV_CACHE_DTYPES)
# The draft's layer layout. uniform: no ``layer_types``, every layer as dflash_config says;
# mixed: ``layer_types`` alternating sliding/full with dflash_config.causal written (it overrides
# every layer); mixed_native: the same layers without dflash_config.causal, so each layer's
# causality comes from its type (vLLM: sliding layers causal, full layers non-causal).
LAYER_LAYOUTS = ("uniform", "mixed", "mixed_native")
# The target model family, for what a target decides about its draft (issue 24): qwen3 (the
# default: full attention, text only), mistral_swa (a model-level sliding window and no
# layer_types, as Mistral-7B-v0.1, Phi-3-mini-4k and Starcoder2 have) and gemma3_mm (a
# multimodal prefix-LM target, Gemma 3's Gemma3ForConditionalGeneration).
TARGET_MODELS = ("qwen3", "mistral_swa", "gemma3_mm")
# The target's dtype as served (its --dtype), against a draft checkpoint that says bfloat16: by
# design the draft takes the target's (SpeculativeConfig's draft_model_config).
TARGET_DTYPES = ("bfloat16", "float16", "float32")
# The target's attention geometry (heads, KV heads, head size) from a real family's config, beside
# a draft of its own geometry: qwen3 = the lane's own target (its head_dim option), llama3_2 =
# Llama-3.2-1B (32 heads, 8 KV heads, head_dim 64), gemma3 = Gemma-3-4B (8 heads, 4 KV heads,
# head_dim 256). harness/attention/checkpoint.py TARGET_HEADS has the dimensions.
TARGET_HEADS = ("qwen3", "llama3_2", "gemma3")
# The draft's own query heads / KV heads, independent of the target's (issue 38): 2/1 = the
# selection lane's checkpoints (GQA 2, as its qwen3 target), 4/4 = an MHA draft, 8/2 = GQA 4.
# The default stands for the lane's own draft checkpoint, GQA 2 as its target: 2/1 in the
# selection lane, 4/2 in the kernel lanes (cpu, gpu, gpu-emulated), whose target is 4/2
# (harness.deployment.settings.draft_shape).
# vLLM has rules that read one model's heads (the current config's, the target's) and apply
# them to every layer (docs/explanation/target-draft-seam.md, 2.10), and impls that take only
# some GQA ratios (HPC_ATTN: 4 or 8).
DRAFT_HEADS = ("2/1", "4/4", "8/2")
DRAFT_HEADS_DEFAULT = DRAFT_HEADS[0]
# short: the lane's own context lengths; long: contexts long enough for split-KV kernels.
CONTEXTS = ("short", "long")
# The tokens of context per request for context = "long" (why these: harness/attention/cell.py).
LONG_CONTEXT_LENS = (1500, 600, 3)
# The target's attention backend per kind, for target_attention = "kind:NAME": the mapping
# names every KV-cache-group kind a DFlash draft layer can be (vllm KVCacheSpecKind values).
TARGET_KIND_PREFIX = "kind:"
DRAFT_LAYER_KINDS = ("full_attention", "sliding_window")
# The target's --block-size (the KV-cache manager's block, shared by target and draft layers):
# "unset" leaves it to vLLM (not user-specified); a number is what a user passes. 64 is the
# largest kernel block FlashInfer takes on SM80/SM90; 128 and 256 make vLLM split manager
# blocks into kernel blocks (docs/explanation/target-draft-seam.md, 2.4).
# A speculative_config option a DFlash/DSpark draft may set beyond method, model, backend and KV
# dtype (issue 38): "none", or one option at a value other than vLLM's default. What each sets and
# where the draft must carry it: harness/deployment/draft_options.py (DRAFT_OPTIONS, keyed by these).
DRAFT_OPTION_TOKENS = (
    "none",
    "maxlen128",
    "quantfp8",
    "moetriton",
    "eagerfalse",
    "revision",
    "coderevision",
    "drafttp1",
    "draftdcp1",
    "loadconfig",
    "dsparktopk4",
    "lmheadfp8",
    "nspec2",
    "batchsched",
    "nopad",
    "localargmax",
    "paralleldraft",
    "probdraft",
    "blockverify",
    "adaptive",
    "synthlen",
    "synthrates",
    "fly",
)
BLOCK_SIZE_UNSET = "unset"
BLOCK_SIZES = (16, 32, 64, 128, 256)


class AxisValueError(ValueError):
    """A value the axis does not accept; the message says what would be valid."""

    def __init__(self, problem: str, choices: tuple[str, ...] = ()):
        super().__init__(problem)
        self.choices = choices


@dataclass(frozen=True)
class Axis:
    name: str
    describe: str
    check: Callable[[object], AxisValue]
    token: Callable[[AxisValue], str | None]
    choices: tuple[str, ...] = ()
    # The value a cell has when the matrix does not vary this axis; it adds no id token,
    # so an axis covered later leaves the ids of the cells at its default unchanged.
    default: AxisValue | None = None


def _one_of(choices: tuple[str, ...]) -> Callable[[object], AxisValue]:
    def check(value: object) -> AxisValue:
        if not isinstance(value, str) or value not in choices:
            raise AxisValueError(f"{value!r} is not allowed", choices)
        return value

    return check


def _choice(
    name: str, describe: str, choices: tuple[str, ...], default: str, token: Callable[[str], str] = str
) -> Axis:
    """An axis of named choices whose default adds no id token (``token`` names the others)."""
    return Axis(
        name, describe, _one_of(choices), lambda v: None if v == default else token(str(v)), choices, default=default
    )


def _boolean(value: object) -> AxisValue:
    if not isinstance(value, bool):
        raise AxisValueError(f"{value!r} is not a boolean", ("true", "false"))
    return value


def _backend(value: object) -> AxisValue:
    if isinstance(value, str) and (value == AUTO_BACKEND or _BACKEND_NAME.match(value)):
        return value
    raise AxisValueError(
        f"{value!r} is not a backend name", ("an AttentionBackendEnum member name such as FLASH_ATTN", "auto")
    )


def _window(value: object) -> AxisValue:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise AxisValueError(f"{value!r} is not a window size", ("0 for no sliding window", "a positive token count"))
    return value


def _head_size(value: object) -> AxisValue:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0 or value % 8:
        raise AxisValueError(f"{value!r} is not a head size", ("a positive multiple of 8 such as 64, 128, 256",))
    return value


def _target_attention(value: object) -> AxisValue:
    """auto, a backend name (the target's --attention-backend), or kind:NAME (the target's
    attention_config.backend_per_kind mapping every kind a draft layer can have to NAME)."""
    if isinstance(value, str):
        name = value.removeprefix(TARGET_KIND_PREFIX)
        if value == AUTO_BACKEND or _BACKEND_NAME.match(name):
            return value
    raise AxisValueError(f"{value!r} is not a target attention setting", ("auto", "FLASH_ATTN", "kind:FLASHINFER"))


def _target_token(value: AxisValue) -> str | None:
    text = str(value)
    if text == AUTO_BACKEND:
        return None
    if text.startswith(TARGET_KIND_PREFIX):
        return f"tgtkind.{text.removeprefix(TARGET_KIND_PREFIX)}"
    return f"tgt.{text}"


def _block_size(value: object) -> AxisValue:
    if value == BLOCK_SIZE_UNSET:
        return BLOCK_SIZE_UNSET
    if isinstance(value, int) and not isinstance(value, bool) and value in BLOCK_SIZES:
        return value
    raise AxisValueError(f"{value!r} is not a block size", (f'"{BLOCK_SIZE_UNSET}"', *map(str, BLOCK_SIZES)))


def _capability(value: object) -> AxisValue:
    if isinstance(value, str) and _CAPABILITY.match(value):
        return value
    raise AxisValueError(f"{value!r} is not a compute capability", ('"8.0"', '"9.0"', '"10.0"', '"12.0"', "..."))


def capability_token(value: AxisValue) -> str:
    major, minor = str(value).split(".")
    return f"sm{major}{minor}"


AXES: tuple[Axis, ...] = (
    Axis("capability", "simulated or real GPU compute capability", _capability, capability_token),
    Axis("backend", "requested attention backend, or auto", _backend, lambda v: str(v)),
    _choice("method", "the draft's model class (dflash, dflash2, dspark, ...)", METHODS, "dflash"),
    Axis("causal", "draft attention is causal", _boolean, lambda v: "causal" if v else "noncausal"),
    Axis("sink", "draft layers carry attention-sink logits", _boolean, lambda v: "sink" if v else "nosink"),
    Axis("sliding_window", "draft sliding window (0 = none)", _window, lambda v: f"swa{v}" if v else None, default=0),
    _choice(
        "layers",
        "draft layer layout: uniform, mixed sliding/full, or mixed with per-layer causality",
        LAYER_LAYOUTS,
        "uniform",
        lambda v: v.replace("_", ""),
    ),
    Axis(
        "head_size",
        "draft (and target) attention head size",
        _head_size,
        lambda v: None if v == 128 else f"hd{v}",
        default=128,
    ),
    _choice(
        "draft_heads",
        "the draft's own query heads / KV heads (num_attention_heads / num_key_value_heads)",
        DRAFT_HEADS,
        DRAFT_HEADS_DEFAULT,
        lambda v: f"dheads.{v.replace('/', 'x')}",
    ),
    Axis("dtype", "model dtype", _one_of(tuple(DTYPE_TOKENS)), lambda v: DTYPE_TOKENS[str(v)], tuple(DTYPE_TOKENS)),
    _choice(
        "kv_cache_dtype",
        "the engine's (the target's) KV-cache dtype, --kv-cache-dtype; an unset draft dtype inherits it",
        KV_CACHE_DTYPES,
        "auto",
        lambda v: f"kv-{v}",
    ),
    _choice(
        "draft_kv_cache_dtype",
        "the draft's own KV-cache dtype (speculative_config.kv_cache_dtype); target = unset",
        DRAFT_KV_CACHE_DTYPES,
        "target",
        lambda v: f"dkv-{v}",
    ),
    Axis(
        "target_attention",
        "the target's attention backend: auto, a backend name, or kind:NAME (backend_per_kind)",
        _target_attention,
        _target_token,
        default=AUTO_BACKEND,
    ),
    _choice(
        "target_model",
        "the target's model family: qwen3, mistral_swa (model-level window) or gemma3_mm (prefix-LM)",
        TARGET_MODELS,
        "qwen3",
        lambda v: f"tgtmodel.{v.replace('_', '')}",
    ),
    _choice(
        "target_dtype",
        "the target's dtype as served (--dtype); the draft checkpoint says bfloat16",
        TARGET_DTYPES,
        "bfloat16",
        lambda v: f"tgtdt.{DTYPE_TOKENS[v]}",
    ),
    _choice(
        "target_head",
        "the target's heads, KV heads and head size, from a real family: qwen3, llama3_2 or gemma3",
        TARGET_HEADS,
        "qwen3",
        lambda v: f"tgthead.{v.replace('_', '')}",
    ),
    Axis(
        "block_size",
        "the target's --block-size (the KV-cache manager's block): unset, or a token count",
        _block_size,
        lambda v: None if v == BLOCK_SIZE_UNSET else f"bs{v}",
        (BLOCK_SIZE_UNSET, *map(str, BLOCK_SIZES)),
        default=BLOCK_SIZE_UNSET,
    ),
    _choice(
        "draft_option",
        "a speculative_config option the draft sets (harness/deployment/draft_options.py), or none",
        DRAFT_OPTION_TOKENS,
        "none",
        lambda v: f"opt.{v}",
    ),
    Axis("loader", "v1 = Model Runner V1 DFlashProposer, v2 = load_dflash_model", _one_of(LOADERS), str, LOADERS),
    _choice("cudagraph", "eager, or capture and replay in a CUDA graph", CUDAGRAPH_MODES, "eager"),
    _choice(
        "context",
        "context lengths: short (the lane's own), or long enough for split-KV kernel paths",
        CONTEXTS,
        "short",
    ),
    Axis(
        "flashinfer_cubin",
        "FlashInfer TRT-LLM cubins available (changes FlashInfer's sink support)",
        _boolean,
        lambda v: "cubin" if v else "nocubin",
    ),
)

AXES_BY_NAME: dict[str, Axis] = {axis.name: axis for axis in AXES}
AXIS_NAMES: tuple[str, ...] = tuple(AXES_BY_NAME)
REQUIRED_AXES: tuple[str, ...] = ("backend", "causal", "sink")


# What every id built by ``cell_id`` looks like; ids read back from a journal are held to it,
# so that no report ever has to escape one.
CELL_ID = re.compile(r"^[A-Za-z0-9_.]+(?:-[A-Za-z0-9_.]+)*$")


def cell_id(axes: dict[str, AxisValue]) -> str:
    """Readable id, e.g. ``sm90-FLASH_ATTN-noncausal-sink-bf16-v2``."""
    tokens = [AXES_BY_NAME[name].token(axes[name]) for name in AXIS_NAMES if name in axes]
    return "-".join(token for token in tokens if token)
