"""This package runs in the gpu-emulated env only (official CUDA vLLM, stub libcuda, no GPU).

The tests of the host patches run in the pytest process itself, which therefore simulates one
GPU generation (SM90) with the patches applied, exactly as a gpu-emulated cell process does.
Both must happen before anything imports Triton or vLLM: at conftest import.
"""

from __future__ import annotations

import pytest

from harness.contracts.lanes import DEFAULT_SM_COUNTS
from harness.cuda import interpreted_kernels

interpreted_kernels.prepare()

CAPABILITY = "9.0"


@pytest.fixture(scope="session")
def host() -> interpreted_kernels.HostGpu:
    from harness.cuda.simulated import SimulatedGpu, install

    gpu = SimulatedGpu(CAPABILITY, flashinfer_cubin=False)
    install(gpu)
    host = interpreted_kernels.HostGpu(gpu.major_minor, DEFAULT_SM_COUNTS[CAPABILITY])
    interpreted_kernels.apply(host)
    return host
