"""The gpu lane's own code on a simulated GPU generation, with official CUDA vLLM's Triton
kernels run by Triton's interpreter on the CPU (``tox -e gpu-emulated``).

Everything a cell does is ``harness.lanes.gpu.GpuLane``'s: the real loaders, the backend read
from each draft layer, the engine's block size and KV-cache layout, the backend's own metadata
builder, the fp8 query quantization of vLLM's attention layer, CUDA-graph cells captured on
dummy metadata and replayed for real batches, the fp32 reference. Only the ``Host`` differs:

- the platform is vLLM's ``CudaPlatform`` with the cell's compute capability simulated
  (``harness.cuda.simulated``, as the selection lane does; one process per generation); run as
  a GPU runner (``tox -e gpu-emulated``: ``harness.plugins.gpu --emulated-gpus 2x9.0``), a run
  serves one generation, named by ``DFLASH_EMULATED_GENERATION``, and reports it as its device;
- the device is the CPU, and every host-side patch the kernels need is in one module,
  ``harness.cuda.interpreted_kernels`` (each with its reason and a test that it computes what a GPU
  computes); the SM count of each generation is an explicit option, ``sm_counts``;
- the draft's KV cache is laid out by vLLM's engine-core, runner and speculator functions, for
  the target (built under the cell's config) and the draft together (``lays_out_kv_cache``:
  ``harness.attention.kv_cache.bind``); each draft layer runs against the view vLLM bound to it;
- CUDA graphs are ``harness.attention.recorded_graphs``: capture records each kernel launch
  (grid, tensors by identity, scalars by value) and replay repeats exactly those;
- backends whose kernels are CUDA binaries (FlashAttention, FlashInfer, ...) are
  ``unavailable`` with one reason: only Triton kernels and torch's own CPU code run here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from harness.contracts.lanes import GPU_EMULATED, GpuEmulatedOptions
from harness.cuda.devices import EMULATED_GENERATION
from harness.lanes.gpu.lane import GpuLane
from harness.matrix import Cell, Matrix

# Backends whose kernels can run on the CPU: Triton kernels (interpreted) and FlexAttention,
# which torch compiles for the CPU itself (its C++ kernel, not the GPU's Triton template).
INTERPRETABLE = ("TRITON_ATTN", "FLEX_ATTENTION")


class EmulatedHost:
    # The simulated CUDA platform puts the model on "cuda"; here it lives on the CPU, as in the
    # selection lane.
    model_device: str | None = "cpu"
    # The draft's KV cache laid out by vLLM's engine-core, runner and speculator functions, on
    # the CPU (a real allocation, sized for the cell's batches): target-draft-seam.md, 2.4.
    lays_out_kv_cache = True

    def __init__(self, options: GpuEmulatedOptions, capabilities: tuple[str, ...]):
        self.options = options
        self.capabilities = capabilities
        self.simulated: str | None = None
        self.patches: dict[str, str] = {}
        self._after_start: list[Callable[[], None]] = []
        # Triton kernel launches of the current cell, by kernel: which paths ran (TRITON_ATTN's
        # split-KV path shows as reduce_segments), read into the cell's details.
        self.launches: dict[str, int] = {}

    def after_start(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the simulated platform and the host patches are in place, before
        the first cell: planted faults patch vLLM, which must not be imported any earlier."""
        if self.simulated is not None:
            raise RuntimeError("this process already simulates a GPU; hooks must be added before the first cell")
        self._after_start.append(hook)

    def start(self, cell: Cell) -> None:
        capability = str(cell.get("capability"))
        if capability not in self.capabilities:
            # A cell the gpu plugin should have left to another generation's runner.
            raise RuntimeError(f"cell {cell.id} needs SM {capability}; this emulated runner serves {self.capabilities}")
        if self.simulated is not None:
            if capability != self.simulated:
                raise RuntimeError(f"cell {cell.id} needs SM {capability}, this process simulates {self.simulated}")
            return
        from harness.cuda import interpreted_kernels
        from harness.cuda.simulated import SimulatedGpu, install

        interpreted_kernels.prepare()
        # torch.cuda answers the same SM count the interpreted kernels are given (HostGpu).
        gpu = SimulatedGpu(capability, flashinfer_cubin=False, sm_count=self.sm_count(capability))
        install(gpu)
        self.patches = dict(
            interpreted_kernels.apply(interpreted_kernels.HostGpu(gpu.major_minor, self.sm_count(capability)))
        )
        self.simulated = capability
        self._count_launches()
        for hook in self._after_start:
            hook()

    def _count_launches(self) -> None:
        from triton.runtime.interpreter import InterpretedFunction

        run = InterpretedFunction.run
        launches = self.launches

        def counted(kernel: Any, *args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("warmup"):
                launches[kernel.__name__] = launches.get(kernel.__name__, 0) + 1
            return run(kernel, *args, **kwargs)

        InterpretedFunction.run = counted

    def cell_details(self) -> dict[str, Any]:
        details = {"triton_launches": dict(sorted(self.launches.items()))}
        self.launches.clear()
        return details

    def sm_count(self, capability: str) -> int:
        if capability not in self.options.sm_counts:
            raise RuntimeError(f"no SM count for SM {capability}: add it to options.sm_counts")
        return int(self.options.sm_counts[capability])

    def device(self) -> Any:
        import torch

        return torch.device("cpu")

    def dist_backend(self) -> str:
        return "gloo"

    def capability(self) -> str:
        return self.simulated or "unset"

    def device_name(self) -> str:
        return f"simulated SM{(self.simulated or '').replace('.', '')} on the CPU (Triton interpreter)"

    def environment(self) -> dict[str, str]:
        """The same for every process of the run (one per generation), as a run's must be."""
        generations = ", ".join(f"SM{c.replace('.', '')}" for c in self.capabilities)
        return {
            "platform": "CudaPlatform, GPU generation simulated (Triton kernels interpreted on the CPU)",
            "device": f"cpu, simulating {generations}",
            "sm_counts": ", ".join(
                f"SM{c.replace('.', '')}={self.options.sm_counts.get(c, 'unset')}" for c in self.capabilities
            ),
            "host_patches": "harness.cuda.interpreted_kernels",
        }

    def graphs(self) -> Callable[[Any], Any]:
        from harness.attention.recorded_graphs import RecordedGraphs

        return RecordedGraphs

    def unavailable(self, cell: Cell) -> str | None:
        backend = cell.requested_backend
        if backend is None:
            return "auto-selection picks CUDA-binary backends (FlashAttention, FlashInfer) on these generations"
        if backend not in INTERPRETABLE:
            return (
                f"{backend}'s kernels are CUDA binaries; the gpu-emulated lane runs only Triton kernels "
                f"(interpreted) and torch's CPU code ({', '.join(INTERPRETABLE)})"
            )
        if backend == "FLEX_ATTENTION" and GPU_EMULATED.value(cell.values, "cudagraph") == "graph":
            return (
                "FlexAttention runs Inductor's C++ kernel on the CPU, which a recorded graph cannot capture "
                "(only Triton launches and torch operations are recorded)"
            )
        return None

    def healthy(self) -> bool:
        return True


def create(matrix: Matrix) -> GpuLane:
    from harness.cuda import interpreted_kernels

    # Before anything imports Triton: @triton.jit reads TRITON_INTERPRET when vLLM's kernel
    # modules are imported.
    interpreted_kernels.prepare()
    options: GpuEmulatedOptions = matrix.lane_options
    # Run as a GPU runner runs (harness.plugins.gpu, --emulated-gpus): this run serves one
    # generation. Run otherwise (run_matrix, the planted-fault tests): every generation listed.
    generation = os.environ.get(EMULATED_GENERATION)
    listed = {str(c) for c in dict(matrix.axes).get("capability", ())}
    capabilities = (generation,) if generation else tuple(sorted(listed, key=float))
    return GpuLane(matrix, EmulatedHost(options, capabilities))
