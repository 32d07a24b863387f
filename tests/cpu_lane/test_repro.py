"""`dflash-matrix repro` for a cpu cell, run for real in this env: the standalone script of a cell
that passes exits 0, and the same script with a fault planted in vLLM (CPU_ATTN's kernel runs
without the layer's sinks, ``plants.drop_sinks``) sees the mismatch and exits 1.

The report is written here from the bundled cpu matrix and its expectations, as a lane run would
record the cell; the script recomputes everything itself (checkpoint, loader, kernels, reference)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import expectations_for
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.vllm

CELL_ID = "CPU_ATTN-causal-sink-bf16-v2"
REPO = Path(__file__).resolve().parents[2]


def _report(folder: Path) -> Path:
    matrix = load_matrix(matrix_path("cpu"))
    cell = next(c for c in expand(matrix) if c.id == CELL_ID)
    expected = expectations_for(matrix, "0.32.0").for_cell(cell)
    run = {"lane": "cpu", "key": "cpu", "matrix": "cpu", "matrix_path": "matrices/cpu.toml", "vllm_version": "0.32.0"}
    recorded = {
        "id": CELL_ID,
        "lane": "cpu",
        "run": "cpu",
        "axes": dict(cell.axes),
        "expected": str(expected.verdict),
        "expected_message": expected.message,
        "verdict": "pass",
        "message": "recorded by this test",
        "tolerance": cell.tolerance,
    }
    folder.mkdir()
    (folder / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [run], "cells": [recorded]}))
    return folder


def _run(script: Path, plant: str | None) -> subprocess.CompletedProcess[str]:
    # The plant patches vLLM in the script's own process before the script runs, as the lane's
    # planted-fault tests patch the cell process.
    code = "import runpy, sys\n"
    if plant:
        code += f"sys.path.insert(0, {str(REPO)!r})\nfrom tests.cpu_lane.plants import {plant}\n{plant}(None)\n"
    code += f"sys.argv = [{str(script)!r}]\nrunpy.run_path({str(script)!r}, run_name='__main__')\n"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=script.parent, capture_output=True, text=True, timeout=900, check=False
    )


def test_the_repro_of_a_passing_cell_exits_0_and_with_a_planted_fault_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "repro.py"
    assert main(["repro", CELL_ID, "--report", str(_report(tmp_path / "report")), "--out", str(script)]) == 0
    clean = _run(script, None)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert "observed: pass: CPU_ATTN, CPU_ATTN" in clean.stdout
    planted = _run(script, "drop_sinks")
    assert planted.returncode == 1, planted.stdout[-3000:] + planted.stderr[-3000:]
    assert "observed: mismatch" in planted.stdout and "FAILURE REPRODUCES" in planted.stdout
