"""The selection lane answers vLLM's questions about the machine from its declared machine, never
from the host (docs/explanation/isolation.md): flipping what the host would answer moves no verdict,
and changing what the declaration answers moves exactly the cells that read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.matrix import expand, load_matrix
from harness.result import CellResult
from harness.runner.session import run_matrix

from . import machine_plants
from .slices import plant_slice_cells

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
ROCM = ("ROCM_AITER_FA", "ROCM_AITER_UNIFIED_ATTN", "ROCM_OCTAVE")


def _slice() -> list[str]:
    """The cells whose verdicts read the machine: CPU_ATTN's fp8 KV check (the host CPU's ISA), the
    ROCm backends' GCN arch, TRITON_ATTN's SM count on SM120; on SM80 and SM120 (one cell process
    each), beside a control of each backend with its target's defaults."""

    def reads_the_machine(v: dict[str, object]) -> bool:
        if not v["flashinfer_cubin"] or v["capability"] not in ("8.0", "12.0") or v.get("target_model") != "qwen3":
            return False
        if v["backend"] == "CPU_ATTN":
            return v["kv_cache_dtype"] != "auto" or v.get("draft_kv_cache_dtype") == "fp8"
        if v["backend"] in ROCM:
            return v.get("target_attention") == "auto" and v["loader"] == "v2"
        return v["backend"] == "TRITON_ATTN" and v["capability"] == "12.0" and v.get("target_attention") == "auto"

    return [cell.id for cell in plant_slice_cells() if reads_the_machine(dict(cell.values))]


CELLS = _slice()
# Each host plant runs on the cells that could read what it changes: the CPU's ISA reaches
# CPU_ATTN's fp8 check only; the device's properties reach the ROCm backends' arch and
# TRITON_ATTN's SM count.
READS = {
    "avx2_host": lambda backend: backend == "CPU_ATTN",
    "amd_host": lambda backend: backend != "CPU_ATTN",
    "declared_device_is_amd": lambda backend: True,
}


def _run(plant: str) -> list[CellResult]:
    backend = {c.id: str(c.values["backend"]) for c in plant_slice_cells() if c.id in set(CELLS)}
    cells = [ident for ident in CELLS if READS[plant](backend[ident])]
    results = run_matrix(MATRIX, plants=[f"{machine_plants.__name__}:{plant}"], cell_ids=cells)
    assert sorted(r.id for r in results) == sorted(cells) and cells
    return results


def _not_as_expected(results: list[CellResult]) -> list[str]:
    return [f"{r.id}: {r.verdict.value} ({r.message}), want {r.expected.value}" for r in results if not r.ok]


def test_the_slice_holds_every_kind_of_question() -> None:
    values = [dict(c.values) for c in expand(load_matrix(MATRIX)) if c.id in set(CELLS)]
    assert any(v["backend"] == "CPU_ATTN" and v["capability"] == "8.0" for v in values)
    assert {v["backend"] for v in values} >= {"CPU_ATTN", "TRITON_ATTN", *ROCM}
    assert len(CELLS) < 80


@pytest.mark.parametrize("plant", ["avx2_host", "amd_host"])
def test_what_the_host_would_answer_moves_no_verdict(plant: str) -> None:
    assert _not_as_expected(_run(plant)) == []


def test_a_declared_device_that_answers_another_gcn_arch_moves_exactly_the_cdna_only_cells() -> None:
    results = _run("declared_device_is_amd")
    moved = {r.id for r in results if not r.ok}
    cdna = {r.id for r in results if r.axes["backend"] == "ROCM_AITER_FA"}
    # An MI300X (CDNA 3) answers yes where an NVIDIA device's name answered no: ROCM_AITER_FA's
    # "compute capability not supported" goes. ROCM_OCTAVE refuses for its head size and KV dtype
    # whatever the arch, and nothing but the ROCm backends reads it.
    assert cdna and cdna <= moved, sorted(cdna - moved)
    assert {r.axes["backend"] for r in results if r.id in moved} <= set(ROCM)
    assert all("compute capability not supported" not in r.message for r in results if r.id in cdna)
