"""Plants for the selection lane's declared machine (harness/contracts/machine.py): what the host
answers underneath the declaration, and what the declaration itself answers.

A host plant changes what the host would tell vLLM if the lane asked it (an AVX2-only CPU, a
device that is an AMD MI300): with every question answered from the declaration, no verdict
moves. A declaration plant changes the declared device's answer: exactly the cells whose verdict
reads it move.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.lanes.selection import SelectionLane

# What torch's CPU probe reports on an AVX2-only x86-64 CPU (torch 2.14's torch.cpu.get_capabilities()
# returns it, and every torch.cpu._is_*_supported reads that).
AVX2_ONLY = {"avx2": True, "avx512_f": False, "avx512_vnni": False, "avx512_bf16": False, "amx_tile": False}


@dataclass(frozen=True)
class _AmdProperties:
    """torch.cuda.get_device_properties of an MI300X under torch's ROCm build."""

    name: str = "AMD Instinct MI300X"
    gcnArchName: str = "gfx942:sramecc+:xnack-"
    major: int = 9
    minor: int = 4
    total_memory: int = 192 << 30
    multi_processor_count: int = 304
    is_integrated: bool = False
    warp_size: int = 64


def avx2_host(lane: SelectionLane) -> None:
    """The host's CPU answers as an AVX2-only one, below torch.cpu's questions (the C probe)."""
    import torch

    torch._C._cpu._get_cpu_capability = lambda: dict(AVX2_ONLY)


def amd_host(lane: SelectionLane) -> None:
    """The host has a driver and an AMD MI300X, below the torch.cuda questions vLLM asks."""
    import torch

    properties = _AmdProperties()
    torch.cuda._lazy_init = lambda: None
    torch.cuda._get_device_properties = lambda device=0: properties
    torch.cuda.device_count = lambda: 1


def declared_device_is_amd(lane: SelectionLane) -> None:
    """The declared device answers torch.cuda.get_device_properties as an MI300X: the GCN arch vLLM's
    ROCm backends read (vllm.platforms.rocm, imported by the first ROCm check of the cell process)."""
    import torch

    properties = _AmdProperties()
    answer: Callable[..., Any] = lambda device=None: properties  # noqa: E731
    torch.cuda.get_device_properties = answer
