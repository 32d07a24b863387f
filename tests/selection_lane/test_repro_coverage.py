"""`dflash-matrix repro` for every method and target axis of the selection lane (issue 37): the lane
runs a few cells here, each cell's script is written from that report and run in this env, and its
exit status is the report's (1 where the cell shows a finding, the script asserting vLLM's correct
behaviour; 0 where it is as expected). A fault planted in the one place engine arguments are made
(``harness.deployment.arguments``: the draft's requested backend dropped) moves the lane's verdict and
the script's exit status alike."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bundled import matrix_path
from harness.cli import main
from harness.result import CellResult
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import dropped_argument
from .pre_fix import BEFORE_FIX, HAS_V1, VLLM

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(VLLM.release < (0, 30), reason=f"vLLM {VLLM}: these axes are recorded from 0.30.0"),
]

# One cell per method and per target axis (several axes a cell where one cell holds them), all on
# SM100: the lane's run of them is one cell process.
CELLS = {
    "dflash2": "sm100-TRITON_ATTN-dflash2-noncausal-nosink-v2-cubin",
    # DSpark (its own loader) behind a float16 target with a per-kind backend (a finding in 0.33.0).
    "dspark, target dtype, per-kind backend": (
        "sm100-FLASH_ATTN_DIFFKV-dspark-causal-sink-hd256-dkv-auto-tgtkind.TRITON_ATTN-tgtdt.fp16-v2-cubin"
    ),
    "target dtype, head geometry, KV dtypes": (
        "sm100-TRITON_ATTN-causal-sink-kv-fp8-dkv-auto-tgtkind.TRITON_ATTN-tgtdt.fp32-tgthead.gemma3-v2-cubin"
    ),
    # Model Runner V1's loader where the release has one (vLLM 0.34.0 removed it), else V2's.
    "target backend, block size, loader v1": (
        f"sm100-TRITON_ATTN-noncausal-nosink-tgt.FLASHINFER-bs128-{'v1' if HAS_V1 else 'v2'}-cubin"
    ),
    # An MHA draft behind the GQA target: the script writes the draft's own heads and audits them.
    "draft heads": "sm100-FLASHINFER-noncausal-nosink-dheads.4x4-v2-cubin",
}
# Its requested backend is what the planted fault drops: the lane's pass becomes wrong-backend.
PLANTED_CELL = CELLS["dflash2"]


def _report(folder: Path, results: list[CellResult]) -> Path:
    run = {"lane": "selection", "key": "s", "matrix": "selection", "vllm_version": importlib.metadata.version("vllm")}
    cells = [{**result.to_json(), "run": "s"} for result in results]
    folder.mkdir(parents=True)
    (folder / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [run], "cells": cells}))
    return folder


def _exit_status(report: Path, cell: str, script: Path) -> int:
    assert main(["repro", cell, "--report", str(report), "--out", str(script)]) == 0
    ran = subprocess.run(
        [sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True, timeout=900, check=False
    )
    assert ran.returncode in (0, 1), ran.stdout[-3000:] + ran.stderr[-3000:]
    return ran.returncode


@pytest.fixture(scope="module")
def lane_report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, CellResult]]:
    results = run_matrix(matrix_path("selection"), cell_ids=list(CELLS.values()))
    return _report(tmp_path_factory.mktemp("lane") / "report", results), {r.id: r for r in results}


@pytest.mark.parametrize("case", sorted(CELLS))
def test_a_cells_script_exits_as_its_report_says(
    case: str, lane_report: tuple[Path, dict[str, CellResult]], tmp_path: Path
) -> None:
    report, results = lane_report
    result = results[CELLS[case]]
    assert result.ok, (result.id, result.verdict, result.message)  # the lane itself as expected
    wanted = 1 if result.finding is not None else 0
    assert _exit_status(report, result.id, tmp_path / "repro.py") == wanted, (result.id, result.verdict)


@pytest.mark.skipif(BEFORE_FIX, reason=f"vLLM {VLLM}: the loader drops the request already")
def test_a_dropped_engine_argument_fails_the_lane_and_the_script_alike(
    lane_report: tuple[Path, dict[str, CellResult]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report, results = lane_report
    assert results[PLANTED_CELL].verdict == Verdict.PASS
    planted = run_matrix(
        matrix_path("selection"), plants=[f"{dropped_argument.__name__}:plant"], cell_ids=[PLANTED_CELL]
    )
    assert planted[0].verdict == Verdict.WRONG_BACKEND, (planted[0].verdict, planted[0].message)
    monkeypatch.setattr(
        dropped_argument.arguments,
        "speculative_config",
        dropped_argument.dropping(dropped_argument.arguments.speculative_config),
    )
    assert _exit_status(report, PLANTED_CELL, tmp_path / "repro.py") == 1
