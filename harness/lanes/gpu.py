"""The gpu lane: official vLLM on a real CUDA device. Each cell's DFlash draft is built by the
real loader (v1 or v2), the backend every draft attention layer carries is read from the layer,
and each layer runs through that backend's kernels against the fp32 reference: eagerly, or
captured in a CUDA graph and replayed (``cudagraph=graph``), since some bugs live only in the
replay (vLLM #48167).

The cell flow is ``harness.attention.cell``, the same device-agnostic code the cpu lane's flow
runs; this module adds what only a GPU has: the device check, CUDA graphs, fp8 KV caches and
sticky CUDA errors. A sticky error (illegal memory access, device-side assert) fails every
later CUDA call in its process, so the cell that hit it is a ``crash`` at stage forward and
the process is marked poisoned: the runner replaces it before the next cell.

One process serves every cell of its worker: ``harness.gpu_plugin`` has already pinned the
worker to one GPU (``CUDA_VISIBLE_DEVICES``), and the cell processes inherit that.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.metadata
import os
import platform
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from harness import flashinfer_jit
from harness.gpu_devices import (
    VISIBLE_DEVICES,
    DeviceRefusal,
    NoDevice,
    driver_release,
    is_sticky_cuda_error,
    query_environment,
)
from harness.lanes.contracts import GPU, GpuOptions
from harness.lanes.protocol import Aftermath
from harness.matrix import Cell, Matrix
from harness.observation import Observation, one_line
from harness.stages import Stage, StageLog
from harness.vllm_release import vllm_provenance


def require_device() -> None:
    """Refuse to start without a CUDA device torch can use: a GPU job must go red, not green."""
    import torch

    if torch.cuda.is_available():
        return
    try:
        driver = query_environment().describe()
    except DeviceRefusal as refusal:
        raise NoDevice(refusal.why) from None
    raise NoDevice(
        f"the driver lists {driver}, but torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use it"
    )


class _Process:
    """Device state that exists once per cell process: the distributed group, the checkpoints
    (written once, in a temp dir) and one target per dtype (a draft only borrows the target's
    embedding and lm_head)."""

    def __init__(self, host: Host, head_dim: int) -> None:
        from harness.attention.checkpoint import ModelShape, write_target
        from harness.attention.draft import init_single_process_group

        self.device = host.device()
        self.shape = ModelShape(head_dim=head_dim)
        self._dir = tempfile.TemporaryDirectory(prefix="dflash-gpu-")
        self.root = Path(self._dir.name)
        init_single_process_group(self.root, host.dist_backend())
        self.target_path = write_target(self.root, self.shape)
        self._drafts: dict[Any, Any] = {}
        self._targets: dict[str, Any] = {}
        # vLLM's loader calls gc.collect() twice per model; with vLLM's import graph frozen
        # out of the collector's reach each build takes a quarter of the time.
        gc.freeze()

    def draft(self, spec: Any, head_size: int | None) -> Any:
        from harness.attention.checkpoint import write_draft

        shape = self.shape if head_size is None else dataclasses.replace(self.shape, head_dim=head_size)
        if (spec, shape) not in self._drafts:
            self._drafts[spec, shape] = write_draft(self.root, spec, shape)
        return self._drafts[spec, shape]

    def target(self, dtype: str, config: Any) -> Any:
        from harness.attention.draft import load_target

        if dtype not in self._targets:
            self._targets[dtype] = load_target(config())
        return self._targets[dtype]


class Host(Protocol):
    """What the gpu lane asks of the machine it runs on: a real CUDA GPU (``CudaHost``), or a
    GPU generation simulated on the CPU with vLLM's Triton kernels interpreted
    (``harness.lanes.gpu_emulated``). Everything else is the same code."""

    def start(self, cell: Cell) -> None:
        """Ready the process for ``cell`` (called before every cell; cheap once started)."""
        ...

    def device(self) -> Any: ...

    def dist_backend(self) -> str: ...

    def capability(self) -> str: ...

    def device_name(self) -> str: ...

    def environment(self) -> dict[str, str]: ...

    def graphs(self) -> Callable[[Any], Any] | None:
        """The graph API factory for ``GraphForward``; None: ``torch.cuda`` graphs."""
        ...

    def engine_config(self, config: Any) -> Any:
        """The cell's VllmConfig as this host needs it."""
        ...

    def unavailable(self, cell: Cell) -> str | None:
        """Why this host cannot run the cell's backend as the cell asks (None: it can)."""
        ...

    def healthy(self) -> bool: ...

    def cell_details(self) -> dict[str, Any]:
        """What the host saw of the cell that just ran, for its details."""
        ...


class CudaHost:
    """The runner's own CUDA GPU (``tox -e gpu``); ``harness.gpu_plugin`` has pinned it."""

    def start(self, cell: Cell) -> None:
        return None

    def device(self) -> Any:
        import torch

        torch.cuda.set_device(0)
        return torch.device("cuda", 0)

    def dist_backend(self) -> str:
        from vllm.platforms import current_platform

        backend: str = current_platform.dist_backend
        return backend

    def capability(self) -> str:
        import torch

        major, minor = torch.cuda.get_device_capability(0)
        return f"{major}.{minor}"

    def device_name(self) -> str:
        import torch

        name: str = torch.cuda.get_device_name(0)
        return name

    def environment(self) -> dict[str, str]:
        import torch

        from harness.attention.draft import platform_name

        properties = torch.cuda.get_device_properties(0)
        return {
            "platform": platform_name(),
            "device": self.device_name(),
            "capability": self.capability(),
            "device_uuid": str(getattr(properties, "uuid", "unknown")),
            "device_memory_gib": f"{properties.total_memory / (1 << 30):.1f}",
            "cuda_runtime": str(torch.version.cuda),
            "driver": driver_release(),
            "driver_cuda": _driver_cuda(),
            "flashinfer_trtllm_kernels": _flashinfer_trtllm(),
            "flashinfer_jit": flashinfer_jit.status(),
            VISIBLE_DEVICES.lower(): os.environ.get(VISIBLE_DEVICES, "unset"),
        }

    def graphs(self) -> Callable[[Any], Any] | None:
        return None

    def engine_config(self, config: Any) -> Any:
        return config

    def unavailable(self, cell: Cell) -> str | None:
        return None

    def healthy(self) -> bool:
        return _cuda_healthy()

    def cell_details(self) -> dict[str, Any]:
        return {}


_PROCESSES: dict[int, _Process] = {}


def _process(host: Host, head_dim: int) -> _Process:
    if head_dim not in _PROCESSES:
        _PROCESSES[head_dim] = _Process(host, head_dim)
    return _PROCESSES[head_dim]


# The least CUDA-graph support a DFlash draft's attention needs for vLLM to capture it: its
# queries are uniform batches of 1 + num_speculative_tokens tokens per request.
_GRAPH_SUPPORT_NEEDED = "UNIFORM_BATCH"
# Model Runner V1's drafter (``LLMBaseProposer.initialize_cudagraph_keys``) never captures a
# FULL graph of the draft: PIECEWISE at most, and attention is the op piecewise graphs split
# at, so its kernels run eagerly between the pieces.
V1_GRAPH_RUNTIME = (
    "Model Runner V1's drafter captures PIECEWISE graphs at most, which leave attention outside; "
    "the draft attention ran eagerly, as vLLM runs it"
)
# How much longer than the cell's each replayed batch's contexts are: every replay must differ
# from the capture's dummy batch and from the batch before it.
REPLAY_CONTEXT_STEP = 13


class GraphForward:
    """The layer's backend call captured in a CUDA graph as Model Runner V2's DFlash speculator
    captures it, then replayed for real batches (``harness.attention.graph.replay_batches``)."""

    def __init__(self, device: Any, graphs: Callable[[Any], Any] | None = None):
        """``graphs(device)`` gives the graph API; None: ``torch.cuda`` graphs
        (``harness.attention.graph.CudaGraphs``)."""
        self.device = device
        self.graphs = graphs

    def refusal(self, attn: Any, attention_config: Any) -> str | None:
        """vLLM runs a DFlash draft eagerly, even when FULL graphs are asked for, where its
        attention's metadata builder declares less than UNIFORM_BATCH support (Model Runner
        V2's ``DFlashSpeculator.init_cudagraph_manager``)."""
        from vllm.v1.attention.backend import AttentionCGSupport

        backend = attn.get_attn_backend()
        spec = attn.get_kv_cache_spec(attention_config)
        support = backend.get_builder_cls().get_cudagraph_support(attention_config, spec)
        if support.value >= AttentionCGSupport[_GRAPH_SUPPORT_NEEDED].value:
            return None
        return (
            f"no CUDA graph: {backend.get_name()}'s metadata builder declares AttentionCGSupport.{support.name} "
            f"for this draft, below the {_GRAPH_SUPPORT_NEEDED} a DFlash draft needs; vLLM runs it eagerly"
        )

    def batches(self, batch: Any) -> tuple[Any, ...]:
        """The cell's batch, then one whose requests hold other context lengths, in another order."""
        from harness.attention.paged import Batch

        longer = tuple(c + REPLAY_CONTEXT_STEP for c in reversed(batch.context_lens))
        return (batch, Batch(context_lens=longer, query_len=batch.query_len))

    def run(self, attn: Any, attention_config: Any, runs: Any, causal: bool, stage_log: StageLog) -> list[Any]:
        """Model Runner V2's sequence (vLLM 0.33.0 ``v1/worker/gpu/spec_decode/dflash``):
        ``DFlashCudaGraphManager.capture`` builds dummy metadata with
        ``build_for_cudagraph_capture`` (seq_len = query length, null-block tables, PAD slots,
        ``max_seq_len`` = max_model_len) and captures the forward on it; each ``propose`` then
        refills the persistent input buffers, builds the real batch's metadata on the same
        builder (``_build_uniform_attn_metadata``, which may re-plan in place, vLLM #48167) and
        replays. The graph sees a new batch only through what stays in those buffers."""
        from harness.attention.graph import CudaGraphs, replay_batches
        from harness.attention.paged import allocate_layer, blocks_needed

        stage_log(Stage.METADATA)
        max_model_len = attention_config.model_config.max_model_len
        block_size = attn.get_kv_cache_spec(attention_config).block_size
        first = runs[0][0]
        layer = allocate_layer(
            attn,
            attention_config,
            len(first.context_lens),
            first.query_len,
            1 + sum(blocks_needed(batch, block_size) for batch, _ in runs),
            max_model_len,
            runs[0][1].query.dtype,
            self.device,
        )
        layer.load_dummy()
        captured = layer.builder.build_for_cudagraph_capture(layer.common(None, causal, max_model_len))

        def loader(batch: Any, inputs: Any, first_block: int) -> Callable[[], None]:
            def load() -> None:
                layer.load(batch, inputs, first_block)
                common = layer.common(batch, causal, max_model_len)
                layer.builder.build(common_prefix_len=0, common_attn_metadata=common)

            return load

        loads = []
        first_block = 1  # each batch its own blocks: a block table frozen at capture reads others
        for batch, inputs in runs:
            loads.append(loader(batch, inputs, first_block))
            first_block += blocks_needed(batch, block_size)
        stage_log(Stage.FORWARD)
        graphs = (self.graphs or CudaGraphs)(self.device)
        return replay_batches(lambda: layer.run(captured), loads, graphs)

def _cuda_healthy() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:
        return False
    return True


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


class GpuLane:
    name = GPU.name

    def __init__(self, matrix: Matrix, host: Host | None = None):
        self.matrix = matrix
        self.options: GpuOptions = matrix.lane_options
        if host is None:
            require_device()
        self.host: Host = host or CudaHost()

    def environment(self) -> Mapping[str, str]:
        # Asked before the first cell: vLLM is not imported here (an emulated host installs
        # its simulated platform first), so versions come from the installed distributions.
        return {
            "lane": self.matrix.lane,
            "vllm": _version("vllm"),
            **vllm_provenance(),
            "torch": _version("torch"),
            "flashinfer": _version("flashinfer-python"),
            "triton": _version("triton"),
            **self.host.environment(),
            "python": platform.python_version(),
        }

    def assess_failure(self, cell: Cell, stage: Stage, error: Exception) -> Aftermath:
        """A sticky CUDA error (illegal memory access, device-side assert) fails every later CUDA
        call in this process, and shows up at the next synchronisation, which may be the
        comparison: it happened in the forward. A failed capture can leave the stream's capture
        state behind. Either way a fresh process is cheaper than doubting every later cell."""
        sticky = is_sticky_cuda_error(one_line(error))
        healthy = self.host.healthy()
        graph_forward = GPU.value(cell.values, "cudagraph") == "graph" and stage in (Stage.FORWARD, Stage.COMPARE)
        if not (sticky or not healthy or graph_forward):
            return Aftermath(stage)
        why = "sticky CUDA error" if sticky else "failed graph capture" if healthy else "CUDA no longer synchronises"
        return Aftermath(Stage.FORWARD if stage is Stage.COMPARE else stage, retire_process=why)

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        import torch

        from harness.attention.cell import (
            CellSetup,
            EagerForward,
            context_lens,
            engine_shape,
            kv_reference_dtype,
            observe_cell,
        )
        from harness.attention.draft import EngineShape, engine_config

        self.host.start(cell)
        wanted = cell.get("capability")
        device_capability = self.host.capability()
        if wanted is not None and wanted != device_capability:
            return Observation(
                cell.requested_backend,
                unavailable=(
                    f"cell is for compute capability {wanted}; this process's GPU, "
                    f"{self.host.device_name()}, is {device_capability}"
                ),
            )
        cannot = self.host.unavailable(cell)
        if cannot is not None:
            return Observation(cell.requested_backend, unavailable=cannot)
        process = _process(self.host, self.options.head_dim)
        kv_cache_dtype = str(GPU.value(cell.values, "kv_cache_dtype"))
        loader = str(GPU.value(cell.values, "loader"))
        graph = GPU.value(cell.values, "cudagraph") == "graph"
        # Model Runner V1 never puts draft attention in a graph (V1_GRAPH_RUNTIME): its graph
        # cells run what vLLM runs, eagerly, and say so.
        captured = graph and loader == "v2"
        query_len = EngineShape().num_speculative_tokens + 1
        contexts = context_lens(cell, self.options.context_lens)
        longest = max(contexts) + (REPLAY_CONTEXT_STEP if captured else 0) + query_len
        # The family's axes (method, draft KV dtype, target attention) as engine settings.
        shape = engine_shape(
            cell,
            EngineShape(
                kv_cache_dtype=kv_cache_dtype,
                block_size=self.options.block_size,
                max_model_len=max(EngineShape().max_model_len, -(-longest // 256) * 256),
            ),
        )
        tokens = query_len * len(contexts)

        def config(target: Path, draft: Path, requested: str | None, dtype: str) -> Any:
            made = engine_config(target, draft, requested, dtype, shape, graph_tokens=tokens if graph else None)
            return self.host.engine_config(made)

        seed = cell.seed + self.options.seed  # each cell its own inputs, the same on every run
        setup = CellSetup(
            device=process.device,
            seed=seed,
            context_lens=contexts,
            query_len=query_len,
            config=config,
            # The target's attention never runs here: built eagerly with a plain cache, so a
            # draft-side kv_cache_dtype or graph refusal is never blamed on the target.
            target_config=lambda target, draft, dtype: self.host.engine_config(
                engine_config(target, draft, None, dtype, EngineShape(block_size=self.options.block_size))
            ),
            forward=GraphForward(process.device, self.host.graphs()) if captured else EagerForward(process.device),
        )
        tolerance = cell.tolerance
        if kv_reference_dtype(kv_cache_dtype) is not None or kv_reference_dtype(shape.draft_kv_cache_dtype or "") in (
            torch.float8_e4m3fn,
            torch.float8_e5m2,
        ):
            tolerance = max(tolerance or 0.0, self.options.kv_fp8_tolerance)
        observation = observe_cell(cell, process, setup, stage_log, tolerance)
        runtime = "graph" if captured else V1_GRAPH_RUNTIME if graph else "eager"
        observation.details.update(cudagraph=runtime, kv_cache_dtype=kv_cache_dtype, **self.host.cell_details())
        return observation


def _flashinfer_trtllm() -> str:
    """Whether vLLM finds FlashInfer's TRT-LLM cubins (installed, or NVIDIA's repository
    reachable): FlashInfer's sink support, and so the expectations, depend on it."""
    try:
        from vllm.utils.flashinfer import has_nvidia_artifactory
    except ImportError:
        return "unknown (this vLLM has no has_nvidia_artifactory)"
    return "available" if has_nvidia_artifactory() else "unavailable"


def _driver_cuda() -> str:
    try:
        return query_environment().driver_cuda
    except DeviceRefusal:
        return "unknown"


def create(matrix: Matrix) -> GpuLane:
    return GpuLane(matrix)
