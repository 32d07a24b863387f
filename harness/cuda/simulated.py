"""A simulated NVIDIA GPU generation for the official CUDA build of vLLM on a host without a GPU.

The selection lane asks vLLM's own CUDA code which attention backend a DFlash draft gets on
SM80/SM90/SM100/SM120. That code runs on a CPU-only host once three things hold, in order:

1. ``libcuda.so.1`` resolves (vLLM's CUDA extensions link against it): a driver or tox's
   stub on ``LD_LIBRARY_PATH``, else the stub ``harness.cuda.stub_driver`` builds and loads;
2. the process environment is pinned *before vLLM is imported*: several vLLM modules read
   it at import time (see ``SimulatedGpu.environment``);
3. ``vllm.platforms._current_platform`` is a ``CudaPlatform`` whose device queries answer
   for the simulated generation, installed as soon as ``vllm.platforms`` has executed, before
   any module binds ``current_platform`` at import (``fa_utils``, the FlashInfer backend,
   ``qwen3_dflash``...). Patching it later, as vLLM's own selector tests do, gives wrong
   answers in 0.33.0; vLLM 0.24.0 resolves it while ``import vllm`` itself runs.

Several selection helpers are ``functools.cache``d without the capability in their key,
so one process simulates exactly one (capability, FlashInfer cubin) pair: ``install``
refuses a second, different one.

The machine is the simulation's, never the host's: every question vLLM asks ``torch.cpu`` (the
ISA: CPU_ATTN's fp8 KV check) and ``torch.cuda`` (device properties: ROCm backends' GCN arch,
TRITON_ATTN's SM count) is answered from the ``SimulatedGpu``'s declared values, which the lane
takes from its contract's ``Machine`` (``harness.contracts.machine``).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from harness.cuda.stub_driver import STUB_LIBRARY, StubBuildError, load_libcuda

_STUB_MARKER = "dflash_matrix_libcuda_stub"
_DEVICE_MEMORY_BYTES = 80 << 30
_H100_SM_COUNT = 132
# torch.cpu.get_capabilities()'s key for each flag, where it differs from the flag's name.
_CAPABILITY_KEYS = {"avx512": "avx512_f", "vnni": "avx512_vnni"}
# What a GPU server's CPU answers (harness.contracts.machine.GPU_SERVER_CPU, repeated here as plain
# data: this package imports nothing of the harness). The lanes pass their contract's own.
_SERVER_CPU = (
    ("avx2", True),
    ("avx512", True),
    ("vnni", True),
    ("avx512_bf16", False),
    ("amx_tile", False),
    ("amx_fp16", False),
)


class SimulationError(RuntimeError):
    """The simulated platform cannot be installed in this process (one clear reason)."""


class NotSimulatable(SimulationError):
    """This install cannot be made to show the asked-for state (a fact of the release, not a crash)."""


@dataclass(frozen=True)
class SimulatedGpu:
    """One simulated GPU generation.

    capability:       compute capability such as "9.0".
    flashinfer_cubin: whether FlashInfer's TRT-LLM cubins count as available. vLLM decides
                      that by an HTTP probe of NVIDIA's artifactory unless told; FlashInfer's
                      sink support depends on it, so it is an explicit input, never a probe.
    """

    capability: str
    flashinfer_cubin: bool
    sm_count: int = _H100_SM_COUNT
    memory_bytes: int = _DEVICE_MEMORY_BYTES
    # (flag, answer) for each ``torch.cpu._is_<flag>_supported`` vLLM asks.
    cpu_flags: tuple[tuple[str, bool], ...] = _SERVER_CPU

    @property
    def major_minor(self) -> tuple[int, int]:
        major, _, minor = self.capability.partition(".")
        return int(major), int(minor)

    @property
    def device_name(self) -> str:
        major, minor = self.major_minor
        return f"Simulated NVIDIA SM{major}{minor}"

    def environment(self, cubins_repository: str) -> dict[str, str]:
        """Variables vLLM and its dependencies read at import time.

        CUDA_VISIBLE_DEVICES="" makes vLLM treat the host like a distributed worker and keep
        Triton enabled with no active driver; without it Triton is replaced by placeholders,
        the Model Runner V2 DFlash loader fails to import and V2 is switched off.
        """
        env = {
            "CUDA_VISIBLE_DEVICES": "",
            "VLLM_HAS_FLASHINFER_CUBIN": "1" if self.flashinfer_cubin else "0",
            # humming (a vLLM kernel dependency) starts two background interpreters at import
            # to JIT-build its CUDA launcher; with no nvcc and no kernels to run they only cost
            # memory and a core each, per cell process (benchmarks/README.md has the figure).
            "HUMMING_DISABLE_PARALLEL_BUILD": "1",
        }
        if not self.flashinfer_cubin:
            # vLLM still probes the cubin repository when cubins are absent; point it at a
            # port nothing listens on so the probe fails at once instead of after 5 s.
            env["FLASHINFER_CUBINS_REPOSITORY"] = cubins_repository
        return env


@dataclass(frozen=True)
class Installed:
    gpu: SimulatedGpu
    platform: Any
    libcuda: str  # "stub" or "driver"


@dataclass(frozen=True)
class SimulatedDeviceProperties:
    """``torch.cuda.get_device_properties`` of the simulated GPU: the fields vLLM 0.24.0-0.34.0
    read. ``gcnArchName`` is the device name, as torch's CUDA build reuses ``name`` for this
    HIP-only field: vLLM's ROCm module reads it at import (``platforms/rocm.py`` _get_gcn_arch)."""

    name: str
    major: int
    minor: int
    total_memory: int
    multi_processor_count: int
    is_integrated: bool = False
    warp_size: int = 32

    @property
    def gcnArchName(self) -> str:
        return self.name


_installed: Installed | None = None


def closed_loopback_url() -> str:
    """A loopback URL whose port was free a moment ago, so a connection is refused at once."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


def installed() -> Installed | None:
    return _installed


def install(gpu: SimulatedGpu) -> Installed:
    """Make this process's vLLM see ``gpu``. Idempotent for the same gpu, refuses any other."""
    global _installed
    if _installed is not None:
        if _installed.gpu != gpu:
            raise SimulationError(
                f"this process already simulates {_installed.gpu}; vLLM caches selection results "
                f"without the capability, so {gpu} needs its own process"
            )
        return _installed
    imported = sorted(name for name in sys.modules if name == "vllm" or name.startswith("vllm."))
    if imported:
        raise SimulationError(
            f"vLLM was imported before the simulated platform was installed ({imported[0]}); "
            "its modules bind current_platform and read the environment at import"
        )
    if not gpu.flashinfer_cubin and importlib.util.find_spec("flashinfer_cubin") is not None:
        # vLLM up to 0.2x requires flashinfer-cubin; its has_flashinfer_cubin() then answers yes.
        raise NotSimulatable(
            "flashinfer_cubin is installed (this vLLM release requires it), so vLLM reports the cubins "
            "available whatever flashinfer_cubin=false asks for"
        )
    libcuda = _load_libcuda()
    os.environ.update(gpu.environment(closed_loopback_url()))
    _answer_machine_questions(gpu)
    simulated: list[Any] = []

    def simulate(platforms: ModuleType) -> None:
        from vllm.platforms import cuda
        from vllm.platforms.interface import DeviceCapability

        capability = DeviceCapability(*gpu.major_minor)
        # Patch the class vLLM resolved (NonNvmlCudaPlatform here), not a subclass: the
        # selector dispatches through CudaPlatform's own classmethods (cls.get_device_capability),
        # and a subclass override would leave them asking torch.cuda, which finds no driver.
        platform_cls = cuda.CudaPlatform
        platform_cls.get_device_capability = classmethod(lambda cls, device_id=0: capability)
        platform_cls.get_device_name = classmethod(lambda cls, device_id=0: gpu.device_name)
        platform_cls.get_device_total_memory = classmethod(lambda cls, device_id=0: gpu.memory_bytes)
        platform_cls.is_fully_connected = classmethod(lambda cls, physical_device_ids: True)
        platform_cls.device_count = classmethod(lambda cls: 1)
        # Page-locked host memory needs the driver; Model Runner V1's proposer buffers ask for it.
        platform_cls.is_pin_memory_available = classmethod(lambda cls: False)
        platform = platform_cls()
        platforms._current_platform = platform  # type: ignore[attr-defined]
        simulated.append(platform)

    # The platform is installed the moment vllm.platforms has executed, before any module can
    # ask for current_platform: vLLM 0.24 resolves it while `import vllm` itself runs
    # (vllm.utils.torch_utils computes PIN_MEMORY at import), 0.33 on first use.
    _after_module_executes("vllm.platforms", simulate)
    # vLLM answers its questions about a model class (_ModelInfo) in a fresh interpreter
    # (registry.py, _run_in_subprocess), which resolves the host's platform, not this one: a class
    # whose module refuses a CPU platform at import (vLLM 0.34.0 vllm/models/mistral/
    # mistral_large4/__init__.py: "only supported on NVIDIA and AMD GPUs") would fail there, where
    # a GPU host's subprocess sees its GPU. So the questions are answered in this process, under
    # the simulated platform, as harness/attention/modelinfo.py answers them on a tox run.
    _after_module_executes("vllm.model_executor.models.registry", _inspect_in_this_process)
    import vllm.platforms as platforms

    if not simulated or platforms._current_platform is not simulated[0]:
        raise SimulationError(f"vLLM's platform is already resolved to {type(platforms._current_platform).__name__}")
    platform = simulated[0]
    _installed = Installed(gpu, platform, libcuda)
    return _installed


def _inspect_in_this_process(registry: ModuleType) -> None:
    if callable(getattr(registry, "_run_in_subprocess", None)):
        registry._run_in_subprocess = lambda fn: fn()  # type: ignore[attr-defined]


def _answer_machine_questions(gpu: SimulatedGpu) -> None:
    """Answer what vLLM asks torch about the machine from ``gpu``, before vLLM is imported.

    Both are looked up on the module at call time by vLLM (``torch.cpu._is_avx512_supported()``,
    ``torch.cuda.get_device_properties(...)``), so replacing the module attributes reaches every
    caller. Only device description is answered: ``torch.cuda.is_available()`` and the device
    count stay the host's (no tensor may go to a device that does not exist)."""
    import torch

    # torch.cpu.get_capabilities() under its own keys (torch 2.14's _is_*_supported read it; vLLM
    # reads it directly too, model_executor/layers/utils.py), and each _is_*_supported besides, for
    # the torch releases whose questions go to C directly.
    flags = dict(gpu.cpu_flags)
    capabilities = {"architecture": "x86_64", **{_CAPABILITY_KEYS.get(f, f): on for f, on in flags.items()}}
    torch.cpu.get_capabilities = lambda: dict(capabilities)
    for flag, answer in flags.items():
        setattr(torch.cpu, f"_is_{flag}_supported", lambda answer=answer: answer)
    major, minor = gpu.major_minor
    properties = SimulatedDeviceProperties(gpu.device_name, major, minor, gpu.memory_bytes, gpu.sm_count)
    torch.cuda.get_device_properties = lambda device=None: properties
    torch.cuda.get_device_capability = lambda device=None: (major, minor)
    torch.cuda.get_device_name = lambda device=None: gpu.device_name


def _after_module_executes(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Run ``callback(module)`` right after module ``name`` is executed by its first import."""

    class Loader(importlib.abc.Loader):
        def __init__(self, wrapped: importlib.abc.Loader):
            self.wrapped = wrapped

        def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
            return self.wrapped.create_module(spec)

        def exec_module(self, module: ModuleType) -> None:
            self.wrapped.exec_module(module)
            callback(module)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None:
                spec.loader = Loader(spec.loader)
            return spec

    sys.meta_path.insert(0, Finder())


def _load_libcuda() -> str:
    try:
        library = load_libcuda()
    except (OSError, StubBuildError) as error:
        raise SimulationError(f"{STUB_LIBRARY} cannot be loaded: {error}") from None
    return "stub" if hasattr(library, _STUB_MARKER) else "driver"


def allow_host_flashinfer_impl(sm_count: int = 132) -> None:
    """Let FlashInferImpl be constructed without a GPU.

    Its __init__ asks the physical device for its SM count and allocates a counter buffer
    on torch.device("cuda"); neither affects which backend a layer carries. Answer the
    first with ``sm_count`` (H100's by default) and allocate the buffer on the host.
    """
    import torch
    import vllm.v1.attention.backends.flashinfer as flashinfer_backend

    flashinfer_backend.get_device_sm_count = lambda device=None: sm_count
    flashinfer_backend._get_multi_ctas_kv_counter_buffer = lambda nbytes, device: torch.zeros(
        int(nbytes), dtype=torch.uint8
    )
