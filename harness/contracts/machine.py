"""The machine a lane's verdicts stand for, as data: what vLLM may ask about it, answered here.

A verdict is a function of the cell and the vLLM release, never of the host that runs the lane.
vLLM asks its machine questions whose answers can change a verdict: CPU_ATTN accepts an fp8 KV
cache only where ``torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_supported()``
(vLLM 0.33.0 ``v1/attention/backends/cpu_attn.py:75``), ROCm backends ask ``torch.cuda`` for the
device's properties, TRITON_ATTN's metadata builder asks for the SM count. A lane that simulates
its machine (the selection lane, gpu-emulated) answers every such question from a ``Machine``
declared in its contract (``harness.contracts.lanes``) and records it in each report's run
object; a question it leaves to the host is found by the tests that flip the host's answer
(tests/selection_lane/test_declared_machine.py). The cpu lane declares none: there the host is
the machine under test, its report records the host's ISA (``host_isa``) and the expectations
that depend on it say so (``host_isa`` in a rule).

Pure data: imports neither torch nor vLLM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields

# The run-environment key a lane reports its host's ISA under, where the host is the machine under
# test (the cpu lane); the expectations' ``host_isa`` rules are judged by it.
HOST_ISA = "host_isa"

# The ``torch.cpu._is_<flag>_supported`` questions vLLM asks (0.24.0-0.34.0), by flag.
CPU_FLAGS = ("avx2", "avx512", "vnni", "avx512_bf16", "amx_tile", "amx_fp16")


@dataclass(frozen=True)
class CpuIsa:
    """The host CPU's instruction-set answers, as ``torch.cpu._is_<flag>_supported()`` gives them."""

    avx2: bool
    avx512: bool
    vnni: bool
    avx512_bf16: bool
    amx_tile: bool
    amx_fp16: bool

    def flags(self) -> dict[str, bool]:
        return {f.name: bool(getattr(self, f.name)) for f in fields(self)}

    @property
    def isa(self) -> str:
        """The one word CPU_ATTN's kernel choice turns on: amx, avx512, avx2 or none."""
        if self.amx_tile:
            return "amx"
        if self.avx512:
            return "avx512"
        return "avx2" if self.avx2 else "none"

    def describe(self) -> str:
        present = [name for name, on in self.flags().items() if on]
        return f"{self.isa} ({', '.join(present) or 'no x86 extension'})"


@dataclass(frozen=True)
class DeclaredGpu:
    """One simulated GPU generation as ``torch.cuda`` and the platform describe it."""

    capability: str  # "9.0"
    name: str
    sm_count: int
    memory_bytes: int


@dataclass(frozen=True)
class Machine:
    """What a lane's verdicts stand for: the host CPU and, by capability, the GPU it serves.

    why: why these answers (which real machines they stand for), for the reports' readers.
    """

    cpu: CpuIsa
    gpus: Mapping[str, DeclaredGpu]
    why: str

    def gpu(self, capability: str) -> DeclaredGpu:
        return self.gpus[capability]

    def describe(self) -> str:
        gpus = "; ".join(f"{g.name}, {g.sm_count} SMs, {g.memory_bytes >> 30} GiB" for g in self.gpus.values())
        return f"host CPU {self.cpu.describe()}; {gpus}"


_GIB = 1 << 30

# The host CPU of a GPU server: x86-64 with AVX-512 (Intel Xeon of the 4th/5th generation and AMD
# EPYC 9004 both answer yes), without AMX (only the Xeons have it). No verdict of the selection
# lane reads AMX: CPU_ATTN's fp8 check is AMX *or* AVX-512. These are the answers the expectations
# were first recorded under (a CI host with AVX-512 and no AMX), now declared instead of asked.
GPU_SERVER_CPU = CpuIsa(avx2=True, avx512=True, vnni=True, avx512_bf16=False, amx_tile=False, amx_fp16=False)

SIMULATED_MACHINE = Machine(
    cpu=GPU_SERVER_CPU,
    gpus={
        # The SM counts of an A100, H100, B200 and RTX PRO 6000. Names and memory stay what the lane
        # answered before it declared a machine (vLLM reads device names in places; no selection or
        # layout answer reads more memory than the KV pool the lane sizes).
        "8.0": DeclaredGpu("8.0", "Simulated NVIDIA SM80", 108, 80 * _GIB),
        "9.0": DeclaredGpu("9.0", "Simulated NVIDIA SM90", 132, 80 * _GIB),
        "10.0": DeclaredGpu("10.0", "Simulated NVIDIA SM100", 148, 80 * _GIB),
        "12.0": DeclaredGpu("12.0", "Simulated NVIDIA SM120", 188, 80 * _GIB),
    },
    why=(
        "the selection and gpu-emulated lanes stand for a GPU server of each generation, whatever host runs "
        "them: every question vLLM asks torch.cpu and torch.cuda about the machine gets these answers"
    ),
)


def cpu_isa_from_flags(flags: Mapping[str, bool]) -> CpuIsa:
    return CpuIsa(**{name: bool(flags.get(name, False)) for name in CPU_FLAGS})
