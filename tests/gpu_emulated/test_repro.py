"""`dflash-matrix repro` for a gpu-emulated cell, run for real in this env as a user runs it
(``python repro.py``, no harness on its path, none of the lane's variables set): the script of a
cell that passes sets up Triton's interpreter and the simulated SM90 itself and exits 0; the same
script with a 2% softmax-scale error planted in TRITON_ATTN's forward (``script_plants``, through
a ``sitecustomize`` on the script's ``PYTHONPATH``) sees the mismatch and exits 1.

The report is written here from the bundled gpu-emulated matrix and its expectations, as a lane
run would record the cell; the script recomputes everything itself (checkpoints, loader, kernels,
reference). The gpu lane's script is the same template with ``EMULATION = None`` (no GPU here:
``tests/core/test_repro.py`` checks the two texts differ only there)."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import expectations_for
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.vllm

CELL_ID = "sm90-TRITON_ATTN-causal-sink-bf16-v2"
TESTS = Path(__file__).resolve().parents[1]
# What the lane and this package's conftest set in their own processes: the script must not need them.
LANE_VARIABLES = ("TRITON_INTERPRET", "CUDA_VISIBLE_DEVICES", "VLLM_HAS_FLASHINFER_CUBIN", "PYTHONPATH")


def _report(folder: Path) -> Path:
    release = importlib.metadata.version("vllm")
    matrix = load_matrix(matrix_path("gpu-emulated"))
    cell = next(c for c in expand(matrix) if c.id == CELL_ID)
    expected = expectations_for(matrix, release).for_cell(cell)
    run = {
        "lane": "gpu_emulated",
        "key": "e",
        "matrix": "gpu-emulated",
        "matrix_path": "matrices/gpu-emulated.toml",
        "vllm_version": release,
    }
    recorded = {
        "id": CELL_ID,
        "lane": "gpu_emulated",
        "run": "e",
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


def _start(script: Path, plant: bool) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in LANE_VARIABLES}
    folder = script.parent / ("planted" if plant else "clean")
    folder.mkdir()
    if plant:
        (folder / "sitecustomize.py").write_text(
            f"import sys\nsys.path.insert(0, {str(TESTS)!r})\n"
            "from gpu_emulated.script_plants import plant_on_import\nplant_on_import()\n"
        )
        env["PYTHONPATH"] = str(folder)
    return subprocess.Popen(
        [sys.executable, str(script)], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_the_repro_of_a_passing_cell_exits_0_and_with_a_planted_softmax_scale_error_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "repro.py"
    assert main(["repro", CELL_ID, "--report", str(_report(tmp_path / "report")), "--out", str(script)]) == 0
    # Both at once: each spends most of its time importing vLLM and interpreting kernels on one core.
    runs = {plant: _start(script, plant) for plant in (False, True)}
    try:
        (clean, clean_err), (planted, planted_err) = (runs[plant].communicate(timeout=900) for plant in (False, True))
    finally:
        for process in runs.values():
            if process.poll() is None:  # a run past its time: end it, not leave it behind
                process.kill()
    assert runs[False].returncode == 0, clean[-3000:] + clean_err[-3000:]
    assert "simulated SM90 on the CPU, Triton interpreted" in clean
    assert "observed: pass: TRITON_ATTN, TRITON_ATTN" in clean
    assert runs[True].returncode == 1, planted[-3000:] + planted_err[-3000:]
    # The layers' settings still read as asked (the impl's scale is put back): the kernels' numbers are off.
    assert "observed: mismatch" in planted and "FAILURE REPRODUCES" in planted
