"""vLLM's words, read: the reasons of a refused backend request, where the engine's start-up stops,
and the host's limits. Shared by every lane that builds drafts with vLLM's loaders."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from harness.observation import HOST_LIMIT, one_line

# The backend a loader selected (and then refused) for a draft's layers.
SELECTED = re.compile(r"Selected backend AttentionBackendEnum\.(\w+) is not valid")
# The platform's auto-selection finding no backend for a layer's config (CudaPlatform.get_attn_backend_cls):
# for a target's own layers, vLLM refuses the deployment (a KV-cache dtype no CUDA backend stores:
# octave_*, fp8_inc, the *_ds_mla caches).
NO_VALID_BACKEND = re.compile(r"No valid attention backend found for")
# A backend's validate_configuration reason for layers that use MLA (AttentionBackend.supports_mla).
MLA_REFUSED = "MLA not supported"
_REASONS = re.compile(r"Reason: (\[.*\])\s*$", re.DOTALL)
# What vLLM's CUDA code says where it needs a real device: a limit of this host, not a verdict.
NO_DRIVER = "Found no NVIDIA driver"
# A CUDA kernel of vLLM's build called on the lane's device cpu (fp8 weight quantization of a draft
# with speculative_config.quantization="fp8"): torch has no CPU implementation of it, a GPU has.
NO_CPU_KERNEL = re.compile(r"Could not run '_C::\w+' with arguments from the 'CPU' backend")


def rejection_reasons(error: ValueError) -> tuple[str, ...]:
    """The reasons list of vLLM's 'Selected backend X is not valid ... Reason: [...]'."""
    text = str(error)
    found = _REASONS.search(text)
    if found is None:
        return (text,)
    try:
        reasons = ast.literal_eval(found.group(1))
    except (ValueError, SyntaxError):
        return (found.group(1)[1:-1],)  # an import error vLLM formatted without quotes
    return tuple(str(reason) for reason in reasons) if isinstance(reasons, list) else (str(reasons),)


def host_limit(error: BaseException) -> str:
    """The ``unavailable`` message of a cell this host cannot answer for (never a verdict on vLLM)."""
    return f"{HOST_LIMIT}vLLM asks for a real CUDA device ({type(error).__name__}: {one_line(error, 300)})"


# vLLM 0.33.0's refusal of a set of backends no KV-cache layout serves together: the engine core
# stops here at start-up, before memory profiling (v1/engine/core.py EngineCore._initialize_kv_caches
# -> Executor.get_supported_kv_cache_layouts -> WorkerBase.get_supported_kv_cache_layouts ->
# v1/attention/backends/utils.py get_supported_kv_cache_layouts, which raises on an empty intersection).
NO_COMMON_LAYOUT = "No KV cache layout satisfies every supported set"
_LAYOUT_PATH = (
    "v1/engine/core.py EngineCore._initialize_kv_caches -> WorkerBase.get_supported_kv_cache_layouts -> "
    "v1/attention/backends/utils.py get_supported_kv_cache_layouts"
)
# The runner's CUDA-graph decision refuses builders no graph mode serves (vLLM 0.33.0
# config/compilation.py CompilationConfig.resolve_cudagraph_mode_and_sizes: "CUDAGraphMode.X is
# not supported with B backend (support: NEVER); please try cudagraph_mode=PIECEWISE ..."), and
# Model Runner V1 refuses capture sizes that no multiple of the decode query length fits
# (adjust_cudagraph_sizes_for_spec_decode): configuration errors the engine raises at start-up.
_GRAPH_REFUSALS = re.compile(r"CUDAGraphMode\.\w+ is not supported with|No valid cudagraph sizes after rounding")
_GRAPH_PATH = (
    "v1/worker/gpu/model_runner.py GPUModelRunner.initialize_kv_cache (V1: gpu_model_runner.py "
    "_check_and_update_cudagraph_mode) -> config/compilation.py resolve_cudagraph_mode_and_sizes"
)
# Everything else the lane runs of the start-up (harness.attention.draft.settle_kv_cache, then
# harness.attention.kv_cache.lay_out): the block size over every layer, the layout, the KV-cache
# groups and config, Model Runner V2's init_attn_backend (each group's metadata builder), the
# runner's and the speculator's CUDA-graph decision and init_kv_cache.
_STARTUP_PATH = (
    "platform.update_block_size_for_backend -> resolve_kv_cache_layout -> get_kv_cache_configs -> "
    "v1/worker/gpu/attn_utils.py init_attn_backend (metadata builders) -> resolve_cudagraph_mode_and_sizes -> "
    "speculator set_attn, init_cudagraph_manager -> init_kv_cache"
)


@dataclass(frozen=True)
class StartupStop:
    """What the engine's start-up does with a cell's built target and draft where it stops.

    kind: ``refusal`` (a stop vLLM documents: unsupported at stage startup), ``crash`` (an
          unexpected raise: a finding where it is vLLM's bug) or ``host-limit`` (a question this
          host cannot answer).
    """

    kind: str
    path: str
    error_type: str
    message: str


def startup_stop(error: BaseException) -> StartupStop:
    text = one_line(error, 600)
    if NO_COMMON_LAYOUT in str(error):
        return StartupStop("refusal", _LAYOUT_PATH, type(error).__name__, text)
    if isinstance(error, ValueError) and _GRAPH_REFUSALS.search(str(error)):
        return StartupStop("refusal", _GRAPH_PATH, type(error).__name__, text)
    if NO_DRIVER in str(error):
        return StartupStop("host-limit", _STARTUP_PATH, type(error).__name__, host_limit(error)[len(HOST_LIMIT) :])
    return StartupStop("crash", _STARTUP_PATH, type(error).__name__, text)
