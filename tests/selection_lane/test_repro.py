"""`dflash-matrix repro` for a selection cell, run for real in this env: the standalone script of
a cell that passes exits 0, and the same script with vLLM's v2 loader as it was before PR #46770
(``pre_fix``, planted in the script's process as the loader module is imported) sees the lost
request and exits 1.

The report is written here from the bundled selection matrix and its expectations, as a lane run
would record the cell; the script asks vLLM everything itself."""

from __future__ import annotations

import importlib.metadata
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

CELL_ID = "sm90-TRITON_ATTN-causal-sink-v2-cubin"
TESTS = Path(__file__).resolve().parents[1]


def _report(folder: Path) -> Path:
    release = importlib.metadata.version("vllm")
    matrix = load_matrix(matrix_path("selection"))
    cell = next(c for c in expand(matrix) if c.id == CELL_ID)
    expected = expectations_for(matrix, release).for_cell(cell)
    run = {"lane": "selection", "key": "s", "matrix": "selection", "vllm_version": release}
    recorded = {
        "id": CELL_ID,
        "lane": "selection",
        "run": "s",
        "axes": dict(cell.axes),
        "expected": str(expected.verdict),
        "expected_message": expected.message,
        "verdict": str(expected.verdict),
        "message": "recorded by this test",
    }
    folder.mkdir()
    (folder / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [run], "cells": [recorded]}))
    return folder


def _run(script: Path, plant: bool) -> subprocess.CompletedProcess[str]:
    code = "import runpy, sys\n"
    if plant:
        code += f"sys.path.insert(0, {str(TESTS)!r})\n"
        code += "from selection_lane.pre_fix import plant_on_import\nplant_on_import()\n"
    code += f"sys.argv = [{str(script)!r}]\nrunpy.run_path({str(script)!r}, run_name='__main__')\n"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=script.parent, capture_output=True, text=True, timeout=900, check=False
    )


def test_the_repro_of_a_cell_as_expected_exits_0_and_with_the_pre_fix_loader_exits_1(tmp_path: Path) -> None:
    report = _report(tmp_path / "report")
    expected = json.loads((report / "matrix.json").read_text())["cells"][0]["expected"]
    script = tmp_path / "repro.py"
    assert main(["repro", CELL_ID, "--report", str(report), "--out", str(script)]) == 0
    clean = _run(script, plant=False)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert f"observed: {expected}" in clean.stdout
    if expected != "pass":
        # vLLM < 0.25 is the pre-fix loader itself (wrong-backend is its expectation): nothing to plant.
        return
    assert "draft attention layers carry: TRITON_ATTN" in clean.stdout
    planted = _run(script, plant=True)
    assert planted.returncode == 1, planted.stdout[-3000:] + planted.stderr[-3000:]
    assert "observed: wrong-backend" in planted.stdout and "FAILURE REPRODUCES" in planted.stdout
