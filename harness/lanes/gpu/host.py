"""Where the gpu lane runs: the ``Host`` seam and the real CUDA GPU behind it (``CudaHost``).

A host answers what only the machine knows: its device, capability and environment, whether
CUDA still synchronises after a failed cell, and how the cell's VllmConfig must be placed.
``harness.lanes.gpu.emulated`` is the other host: a GPU generation simulated on the CPU.
Imports torch and vLLM only inside the methods that need them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Protocol

from harness.cuda import flashinfer_jit
from harness.cuda.devices import VISIBLE_DEVICES, DeviceRefusal, NoDevice, driver_release, query_environment
from harness.matrix import Cell


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


class Host(Protocol):
    """What the gpu lane asks of the machine it runs on: a real CUDA GPU (``CudaHost``), or a
    GPU generation simulated on the CPU with vLLM's Triton kernels interpreted
    (``harness.lanes.gpu.emulated``). Everything else is the same code."""

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

    # Where the model lives when not on the platform's own device (None: the platform's):
    # a simulated CUDA platform says "cuda" while an emulated host computes on the CPU.
    model_device: str | None

    # Whether the cell's draft runs against the KV cache vLLM's own runner and speculator
    # functions lay out (``CellPlan.kv_cache_through_vllm``) rather than the harness's own.
    lays_out_kv_cache: bool

    def unavailable(self, cell: Cell) -> str | None:
        """Why this host cannot run the cell's backend as the cell asks (None: it can)."""
        ...

    def healthy(self) -> bool: ...

    def cell_details(self) -> dict[str, Any]:
        """What the host saw of the cell that just ran, for its details."""
        ...


class CudaHost:
    """The runner's own CUDA GPU (``tox -e gpu``); ``harness.plugins.gpu`` has pinned it."""

    model_device: str | None = None
    # Not yet on a real GPU: nothing here has run kv_cache.bind on one (target-draft-seam.md, 2.4).
    lays_out_kv_cache = False

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

    def unavailable(self, cell: Cell) -> str | None:
        return None

    def healthy(self) -> bool:
        return _cuda_healthy()

    def cell_details(self) -> dict[str, Any]:
        return {}


def _cuda_healthy() -> bool:
    import torch

    try:
        torch.cuda.synchronize()
    except Exception:
        return False
    return True


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
