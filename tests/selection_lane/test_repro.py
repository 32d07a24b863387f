"""`dflash-matrix repro` for a selection cell, run for real in this env: the standalone script of
a cell that passes exits 0, and the same script with vLLM's v2 loader as it was before PR #46770
(``pre_fix``, planted in the script's process as the loader module is imported) sees the lost
request and exits 1. The script of a target/draft seam finding's cell (the target's window
reaching the draft) exits 1 on this vLLM, where the bug is, and 0 with the seam
fixed (``seam_fix``, planted the same way).

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
from harness.observation import Observation
from harness.result import decide

from .pre_fix import VLLM

pytestmark = pytest.mark.vllm

CELL_ID = "sm90-TRITON_ATTN-causal-sink-v2-cubin"
BEFORE_SEAM_CELLS = VLLM.release < (0, 30)
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


def _run(script: Path, plant: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the script as a user would, with ``plant`` ("module:function" under tests/) called first."""
    code = "import runpy, sys\n"
    if plant:
        module, function = plant.split(":")
        code += f"sys.path.insert(0, {str(TESTS)!r})\n"
        code += f"from {module} import {function}\n{function}()\n"
    code += f"sys.argv = [{str(script)!r}]\nrunpy.run_path({str(script)!r}, run_name='__main__')\n"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=script.parent, capture_output=True, text=True, timeout=900, check=False
    )


def test_the_repro_of_a_cell_as_expected_exits_0_and_with_the_pre_fix_loader_exits_1(tmp_path: Path) -> None:
    report = _report(tmp_path / "report")
    expected = json.loads((report / "matrix.json").read_text())["cells"][0]["expected"]
    script = tmp_path / "repro.py"
    assert main(["repro", CELL_ID, "--report", str(report), "--out", str(script)]) == 0
    clean = _run(script)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert f"observed: {expected}" in clean.stdout
    if expected != "pass":
        # vLLM < 0.25 is the pre-fix loader itself (wrong-backend is its expectation): nothing to plant.
        return
    assert "draft attention layers carry: TRITON_ATTN" in clean.stdout
    planted = _run(script, "selection_lane.pre_fix:plant_on_import")
    assert planted.returncode == 1, planted.stdout[-3000:] + planted.stderr[-3000:]
    assert "observed: wrong-backend" in planted.stdout and "FAILURE REPRODUCES" in planted.stdout


# One seam finding's script (both seam findings' scripts are the same template, and seam_fix fixes
# both at once; the mm-prefix finding's cells are judged by the lane and its script is written by
# the same code): two script runs of about 12 s each.
SEAM_CELLS = {
    "target-window-reaches-draft": "sm90-FLASH_ATTN-noncausal-nosink-tgtmodel.mistralswa-v2-cubin",
}


@pytest.mark.skipif(BEFORE_SEAM_CELLS, reason=f"vLLM {VLLM}: the target_model cells are recorded from 0.30.0")
@pytest.mark.parametrize("finding", sorted(SEAM_CELLS))
def test_a_seam_findings_script_exits_1_on_this_vllm_and_0_with_the_seam_fixed(tmp_path: Path, finding: str) -> None:
    ident = SEAM_CELLS[finding]
    matrix = load_matrix(matrix_path("selection"))
    cell = next(c for c in expand(matrix) if c.id == ident)
    expected = expectations_for(matrix, str(VLLM)).for_cell(cell)
    assert expected.finding is not None and expected.finding.id == finding
    backend = str(cell.get("backend"))
    lost = (expected.message or "",)  # the setting the finding's rule says reaches the draft
    seen = Observation(backend, platform_choice=backend, observed_backends=(backend,), lost_settings=lost)
    run = {"lane": "selection", "key": "s", "matrix": "selection", "vllm_version": str(VLLM)}
    recorded = {**decide(cell, seen, expected).to_json(), "run": "s"}
    (tmp_path / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [run], "cells": [recorded]}))
    script = tmp_path / "repro.py"
    assert main(["repro", ident, "--report", str(tmp_path), "--out", str(script)]) == 0
    buggy = _run(script)
    assert buggy.returncode == 1, buggy.stdout[-3000:] + buggy.stderr[-3000:]
    assert f"observed: wrong-setting: model.layers.0.self_attn.attn: {expected.message}" in buggy.stdout
    fixed = _run(script, "selection_lane.seam_fix:fix_on_import")
    assert fixed.returncode == 0, fixed.stdout[-3000:] + fixed.stderr[-3000:]
    assert f"observed: pass: every draft layer carries {backend}" in fixed.stdout
