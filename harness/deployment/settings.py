"""The engine settings a cell asks for, from its axes: one function per translation, called by
every lane (and, through ``harness.deployment.arguments``, by the finding pages and ``repro``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from harness.axes import (
    BLOCK_SIZE_UNSET,
    DRAFT_HEADS_DEFAULT,
    DRAFT_LAYER_KINDS,
    LONG_CONTEXT_LENS,
    TARGET_KIND_PREFIX,
    AxisValue,
)
from harness.deployment.models import DraftSpec, ModelShape, with_draft_heads

Axes = Mapping[str, AxisValue]


@dataclass(frozen=True)
class EngineSettings:
    """Engine settings every cell shares.

    ``block_size`` None leaves the choice to vLLM, as a user who does not pass
    ``--block-size`` does: vLLM 0.33.0's ``CacheConfig`` then fills in its default without
    marking it user-specified, and the selector (``v1/attention/selector.py``) asks backends
    about ``block_size=None``. A lane sets it only where its user (or a kernel vLLM does not
    size for) must: the cpu lane's CPU_ATTN needs a multiple of 32.
    """

    block_size: int | None = None
    num_speculative_tokens: int = 4
    max_model_len: int = 256
    max_num_seqs: int = 4
    kv_cache_memory_bytes: int = 64 * 1024 * 1024
    kv_cache_dtype: str = "auto"
    # The speculative config's kv_cache_dtype; None = unset, the draft shares the target's.
    draft_kv_cache_dtype: str | None = None
    # The target's attention: None = auto, a backend name (the attention config's backend), or a
    # backend_per_kind mapping (vLLM >= 0.26).
    target_backend: str | None = None
    target_backend_per_kind: tuple[tuple[str, str], ...] = ()
    method: str = "dflash"  # the draft's family member (harness.axes.METHODS)
    # A speculative_config option the draft sets beyond the ones above (harness.deployment.draft_options).
    draft_option: str = "none"
    # "dummy" for a lane that runs no kernel: vLLM then initialises the weights instead of
    # reading them, so a config-only checkpoint (checkpoint.write_draft(weights=False)) loads.
    load_format: str = "auto"
    # Where the model lives, when not on the platform's own device: a simulated CUDA platform
    # (harness.cuda.simulated) says "cuda", and vLLM's EngineArgs has no device argument.
    device: str | None = None


# context = "long": contexts past the kernels' split-KV / multi-tile thresholds.
# - TRITON_ATTN (vLLM 0.33.0, triton_unified_attention.py) takes its 3D split-KV path (16
#   softmax segments, NUM_PAR_SOFTMAX_SEGMENTS) only for causal batches of at most 8 query
#   tokens per request (MAX_3D_QUERY_LEN) and num_seqs * cdiv(q, BLOCK_Q) <= seq_threshold_3D
#   (MIN_LAUNCH_GRID_SIZE_2D // kv heads); non-causal DFlash queries always run the 2D kernel.
# - CPU_ATTN (csrc/cpu/cpu_attn_impl.hpp) walks the KV in L2-sized tiles (online softmax across
#   tiles, where a sink counted per tile would show); it splits one request's KV across threads
#   only for a 1-token query tile (split_kv_q_token_num_threshold = 1, VLLM_CPU_ATTN_SPLIT_KV=1)
#   and with more than one OpenMP thread: DFlash's 5-token queries never take that path.
# LONG_CONTEXT_LENS (harness.axes): 1500 and 600 tokens are several KV tiles for every head
# size here; 3 keeps one short request.


def context_lens(axes: Axes, short: tuple[int, ...]) -> tuple[int, ...]:
    """The context lengths a cell's requests have: the long ones (``harness.axes.LONG_CONTEXT_LENS``)
    for ``context = "long"``, else the lane's ``short`` ones."""
    return LONG_CONTEXT_LENS if axes.get("context", "short") == "long" else short


def engine_settings(axes: Axes, base: EngineSettings | None = None) -> EngineSettings:
    """The engine settings a cell asks for: its KV dtypes, the target's attention and
    --block-size, the method, and a model length that holds its contexts. A target left to
    auto keeps ``base``'s (a lane option, e.g. the selection lane's ``target_backend``)."""
    base = base or EngineSettings()
    target = str(axes.get("target_attention", "auto"))
    draft_kv = str(axes.get("draft_kv_cache_dtype", "target"))
    per_kind: tuple[tuple[str, str], ...] = ()
    target_backend = base.target_backend
    if target.startswith(TARGET_KIND_PREFIX):
        per_kind = tuple((kind, target.removeprefix(TARGET_KIND_PREFIX)) for kind in DRAFT_LAYER_KINDS)
        target_backend = None
    elif target != "auto":
        target_backend = target
    longest = max(context_lens(axes, ()) or (0,))
    # An int is the user's --block-size; "unset" (BLOCK_SIZE_UNSET) leaves base's.
    block_size = axes.get("block_size", BLOCK_SIZE_UNSET)
    return dataclasses.replace(
        base,
        block_size=block_size if isinstance(block_size, int) else base.block_size,
        kv_cache_dtype=str(axes.get("kv_cache_dtype", "auto")),
        draft_kv_cache_dtype=None if draft_kv == "target" else draft_kv,
        target_backend=target_backend,
        target_backend_per_kind=per_kind,
        method=str(axes.get("method", "dflash")),
        draft_option=str(axes.get("draft_option", "none")),
        max_model_len=max(base.max_model_len, longest + 256),
    )


def draft_spec(axes: Axes) -> tuple[DraftSpec, int | None]:
    """The draft a cell asks for: its family member, attention features and head size
    (None when the matrix does not vary it)."""
    spec = DraftSpec(
        causal=bool(axes.get("causal")),
        sink=bool(axes.get("sink")),
        sliding_window=int(axes.get("sliding_window", 0) or 0),
        method=str(axes.get("method", "dflash")),
        layers=str(axes.get("layers", "uniform")),
    )
    head_size = axes.get("head_size")
    return spec, None if head_size is None else int(head_size)


def draft_shape(axes: Axes, base: ModelShape) -> ModelShape:
    """The dimensions of the draft a cell asks for: the lane's ``base`` with the cell's head size
    and its own query / KV heads (``draft_heads``) where it sets them. The axis's default stands
    for ``base``'s own heads, GQA 2 as each lane's qwen3 target (2/1 in the selection lane, 4/2
    in the kernel lanes, whose target is 4/2), so a cell at the default keeps the lane's draft."""
    shape = base
    if (head_size := axes.get("head_size")) is not None:
        shape = dataclasses.replace(shape, head_dim=int(head_size))
    if (heads := axes.get("draft_heads", DRAFT_HEADS_DEFAULT)) != DRAFT_HEADS_DEFAULT:
        shape = with_draft_heads(shape, str(heads))
    return shape


def requested_backend(axes: Axes) -> str | None:
    """The draft's requested attention backend (None: auto-selection)."""
    backend = axes.get("backend", "auto")
    return None if backend == "auto" else str(backend)
