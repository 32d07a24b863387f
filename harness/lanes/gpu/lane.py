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

One process serves every cell of its worker: ``harness.plugins.gpu`` has already pinned the
worker to one GPU (``CUDA_VISIBLE_DEVICES``), and the cell processes inherit that.

Layout: this module is the lane (``GpuLane``); its per-process state is a ``Workspace``
(``harness.attention.workspace``, as the cpu lane's); ``host`` is the
machine it runs on (the ``Host`` seam, ``CudaHost``, the device check); ``graphs`` is the
CUDA-graph forward (``GraphForward``).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from harness.contracts.lanes import GPU, GpuOptions
from harness.cuda.devices import is_sticky_cuda_error
from harness.lanes.gpu.graphs import V1_GRAPH_RUNTIME, GraphForward
from harness.lanes.gpu.host import CudaHost, Host, require_device
from harness.lanes.protocol import Aftermath
from harness.matrix import Cell, Matrix
from harness.observation import Observation, one_line
from harness.releases.provenance import installed_version, vllm_provenance
from harness.stages import Stage, StageLog

if TYPE_CHECKING:
    from harness.attention.workspace import Workspace


class GpuLane:
    name = GPU.name

    def __init__(self, matrix: Matrix, host: Host | None = None):
        self.matrix = matrix
        self.options: GpuOptions = matrix.lane_options
        if host is None:
            require_device()
        self.host: Host = host or CudaHost()
        self._workspace: Workspace | None = None
        self._device: Any = None

    def environment(self) -> Mapping[str, str]:
        # Asked before the first cell: vLLM is not imported here (an emulated host installs
        # its simulated platform first), so versions come from the installed distributions.
        return {
            "lane": self.matrix.lane,
            "vllm": installed_version("vllm"),
            **vllm_provenance(),
            "torch": installed_version("torch"),
            "flashinfer-python": installed_version("flashinfer-python"),
            "triton": installed_version("triton"),
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

    def workspace(self) -> Workspace:
        """The process's checkpoints and targets, set up on the first cell, on the host's device."""
        if self._workspace is None:
            from harness.attention.workspace import Workspace, WorkspaceSettings
            from harness.deployment.models import ModelShape

            self._device = self.host.device()
            shape = ModelShape(head_dim=self.options.head_dim)
            self._workspace = Workspace(WorkspaceSettings(self.host.dist_backend(), shape, shape, prefix="dflash-gpu-"))
        return self._workspace

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        from harness.attention.cell import CellPlan, EagerForward, observe_cell
        from harness.deployment.cells import gpu_captured, gpu_deployment
        from harness.deployment.settings import EngineSettings, context_lens

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
        workspace = self.workspace()
        device = self._device
        kv_cache_dtype = str(GPU.value(cell.values, "kv_cache_dtype"))
        graph = GPU.value(cell.values, "cudagraph") == "graph"
        # Model Runner V1 never puts draft attention in a graph (V1_GRAPH_RUNTIME): its graph
        # cells run what vLLM runs, eagerly, and say so.
        captured = gpu_captured(cell.values)
        # The family's axes (method, draft KV dtype, target attention) as engine settings; the
        # model lives where the host says (an emulated host's simulated CUDA platform says "cuda").
        deployment = gpu_deployment(cell.values, self.options, self.host.model_device)
        engine = deployment.settings
        query_len = engine.num_speculative_tokens + 1
        contexts = context_lens(cell.values, self.options.context_lens)
        plan = CellPlan(
            device=device,
            seed=cell.seed + self.options.seed,  # each cell its own inputs, the same on every run
            context_lens=contexts,
            query_len=query_len,
            engine=engine,
            # The target's attention never runs here: built eagerly with a plain cache, so a
            # draft-side kv_cache_dtype or graph refusal is never blamed on the target.
            target_engine=EngineSettings(block_size=self.options.block_size, device=self.host.model_device),
            forward=GraphForward(device, self.host.graphs()) if captured else EagerForward(device),
            tolerance=cell.tolerance,
            unmodelled_fp8_tolerance=self.options.kv_fp8_tolerance,
            graph_tokens=deployment.graph_tokens,
            kv_cache_through_vllm=self.host.lays_out_kv_cache,
            # Every attribute of the draft's layers and impls and every field of its config, as the
            # selection and cpu lanes judge them (target-draft-seam.md, 2.14).
            provenance_audit=True,
        )
        observation = observe_cell(cell, plan, workspace, stage_log)
        runtime = "graph" if captured else V1_GRAPH_RUNTIME if graph else "eager"
        observation.details.update(cudagraph=runtime, kv_cache_dtype=kv_cache_dtype, **self.host.cell_details())
        return observation


def create(matrix: Matrix) -> GpuLane:
    return GpuLane(matrix)
