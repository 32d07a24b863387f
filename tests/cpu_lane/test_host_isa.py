"""The cpu lane's host is the machine under test: its report records the host's ISA as vLLM asks
it, and the expectations that depend on it say so (``host_isa`` rules). An AVX-512 host proves the
AVX2 answers too: the plant makes torch.cpu answer as an AVX2-only CPU does, which is all vLLM reads
(CPU_ATTN's kernel is chosen by the ISA string it derives from those answers)."""

from __future__ import annotations

import pytest

from harness.verdict import Verdict

from . import plants
from .test_planted_faults import FP8_SLICE, _fp8, planted

pytestmark = pytest.mark.vllm


def test_an_avx2_host_is_judged_by_its_own_rules_and_crashes_exactly_the_fp8_cells() -> None:
    results = planted(plants.avx2_host, FP8_SLICE)
    wrong = [f"{r.id}: {r.verdict.value} ({r.message}), want {r.expected.value}" for r in results if not r.ok]
    assert not wrong, "\n".join(wrong)
    fp8 = [r for r in results if _fp8(r.axes)]
    # Expected crash only under the AVX2 rule: the run's host_isa reached the judge.
    findings = {r.finding.id if r.finding else None for r in fp8}
    assert fp8 and {r.expected for r in fp8} == {Verdict.CRASH} and findings == {"cpu-fp8-kv-isa-guard-skipped"}
    assert all("Unsupported CPU attention configuration" in r.message for r in fp8)
    assert Verdict.CRASH not in {r.verdict for r in results if not _fp8(r.axes)}
