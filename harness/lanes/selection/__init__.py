"""The selection lane: which attention backend a DFlash draft gets on each GPU generation.

It runs the official CUDA build of vLLM on a host without a GPU, with the GPU generation
simulated (``harness.cuda.simulated``). Per cell it records

* the claim: the requested backend's own ``validate_configuration`` reasons;
* the platform's answer for the explicit request in isolation (a backend, or the
  ValueError's reasons), and the auto-selection answer for the same draft layer;
* the draft built through vLLM's real loader (Model Runner V2's ``load_dflash_model``, or
  Model Runner V1's ``DFlashProposer``) from a config-only checkpoint with dummy weights on
  device ``cpu``, behind the real target built the same way under the same config, and the
  backend every draft attention layer carries;
* the KV cache of target and draft laid out by vLLM's engine-core and model-runner functions
  (``harness.attention.kv_cache``): the groups, each group's kernel block size as the runner
  and as the speculator compute it, and the view each draft layer is bound to.

No kernel runs here: the lane proves selection and wiring (does the request reach the
draft's layers, and what does the platform choose), never that a kernel computes correctly
on that GPU. One process simulates one (capability, FlashInfer cubin) pair, because vLLM
caches selection helpers without the capability in their key (the contract's process key).

Layout: this module is the lane (``SelectionLane``); ``process_state`` is everything that
touches vLLM for one simulated GPU in one process; ``census`` sorts vLLM's backend enum;
``rejections`` reads vLLM's refusals. The checkpoints (config only), engine configs,
distributed init, loaders and vLLM entry points come from ``harness.attention``, shared with
the other lanes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from harness.axes import AxisValue, capability_token
from harness.contracts.lanes import SELECTION, SelectionOptions
from harness.cuda.simulated import NotSimulatable, SimulatedGpu, install
from harness.matrix import Cell, Matrix
from harness.observation import Observation
from harness.releases.provenance import installed_version, vllm_provenance
from harness.stages import Stage, StageLog

if TYPE_CHECKING:
    from harness.lanes.selection.process_state import ProcessState


def gpu_for(cell: Cell) -> SimulatedGpu:
    return _gpu(cell.values)


def _gpu(values: Mapping[str, AxisValue]) -> SimulatedGpu:
    """The process key's GPU, with the answers the lane's declared machine gives to what vLLM asks
    torch about it (harness.contracts.machine): the host's own are never consulted."""
    capability = str(values.get("capability"))
    assert SELECTION.machine is not None
    declared = SELECTION.machine.gpu(capability)
    return SimulatedGpu(
        capability,
        bool(SELECTION.value(values, "flashinfer_cubin")),
        sm_count=declared.sm_count,
        memory_bytes=declared.memory_bytes,
        cpu_flags=tuple(SELECTION.machine.cpu.flags().items()),
    )


# Set in a process key's warm parent (harness.runner.warm, Preload.per_key) and so in every cell
# process it forks: the GPU it simulates, and what stopped its start if something did.
_prepared: tuple[SimulatedGpu, BaseException | None] | None = None


def prepare_process(values: Mapping[str, AxisValue]) -> None:
    """A process key's warm parent does here what the lane's first cell in each of the key's cell
    processes did (``SelectionLane._state_for``): install the key's simulated GPU, then import vLLM
    under it (``ProcessState.import_vllm``). What stops it is kept, and the lane reports it on
    each cell as it would have (an install that cannot show the state is ``unavailable``)."""
    global _prepared
    gpu = _gpu(values)
    try:
        install(gpu)
        from harness.lanes.selection.process_state import ProcessState

        ProcessState.import_vllm()
    except BaseException as error:
        _prepared = (gpu, error)
        return
    _prepared = (gpu, None)


class SelectionLane:
    name = SELECTION.name

    def __init__(self, matrix: Matrix):
        self.matrix = matrix
        self.options: SelectionOptions = matrix.lane_options
        self.backends = frozenset(str(b) for b in dict(matrix.axes)["backend"])
        self._state: ProcessState | None = None
        self._startup_error: BaseException | None = None
        self._after_install: list[Callable[[], None]] = []

    def after_install(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` once the simulated platform is installed, before any cell touches vLLM.

        Planted faults that patch vLLM go through here: importing vLLM any earlier would
        resolve the platform before the lane can simulate the cell's GPU generation.
        """
        if self._state is not None:
            raise RuntimeError("the simulated platform is already installed; hooks must be added before the first cell")
        self._after_install.append(hook)

    def environment(self) -> Mapping[str, str]:
        capabilities = sorted({str(c) for c in dict(self.matrix.axes)["capability"]}, key=lambda c: float(c))
        env = {
            "lane": SELECTION.name,
            "platform": "CudaPlatform, simulated (no GPU, no kernels run)",
            # What every question vLLM asks about the machine was answered with (never the host's).
            "machine": SELECTION.machine.describe() if SELECTION.machine else "the host's",
            # One run covers every generation its matrix lists, one cell process each.
            "device": "simulated " + ", ".join(capability_token(c).upper() for c in capabilities),
        }
        env.update({name: installed_version(name) for name in ("vllm", "torch", "flashinfer-python", "triton")})
        env.update(vllm_provenance())
        if self.options.target_backend:
            env["target_backend"] = self.options.target_backend
        return env

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        stage_log(Stage.CONFIG)
        try:
            state = self._state_for(cell)
        except NotSimulatable as why:
            return Observation(requested_backend=cell.requested_backend, unavailable=str(why))
        return state.observe(cell, stage_log)

    def _state_for(self, cell: Cell) -> ProcessState:
        if self._startup_error is not None:
            raise self._startup_error
        gpu = gpu_for(cell)
        if self._state is None:
            try:
                if _prepared is not None and _prepared[0] == gpu and _prepared[1] is not None:
                    raise _prepared[1]  # this process's warm parent could not start it
                # The platform first: torch and vLLM are imported only after, by process_state.
                # (Installed already where the key's warm parent did it: install is idempotent.)
                install(gpu)
                from harness.lanes.selection.process_state import ProcessState

                self._state = ProcessState(gpu, self.options, self.backends)
                for hook in self._after_install:
                    hook()
            except BaseException as error:
                self._startup_error = error
                raise
        elif self._state.gpu != gpu:
            raise RuntimeError(f"cell {cell.id} needs {gpu}, this process simulates {self._state.gpu}")
        return self._state


def create(matrix: Matrix) -> SelectionLane:
    return SelectionLane(matrix)
