"""A new vLLM bug no finding records cannot hide as an expected verdict.

The bug planted here: Model Runner V2's DFlash loader loses the draft's
``speculative_config.attention_backend`` (the loader as before PR #46770, ``prefix_loader``),
on a release whose expectations hold no finding for it (the PR #46770 finding holds before 0.25).
Run through `dflash-matrix run`, as CI runs the lane, the report says of the cells it makes
wrong-backend that they are faults no finding records (matrix.md and matrix.json, not only their
verdicts); and recording them with an expectation rule that names no finding is refused when the
expectations load: one line, exit 2, before any cell runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.reports.text import md

from . import prefix_loader
from .pre_fix import BEFORE_FIX, HAS_V1, VLLM

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(BEFORE_FIX, reason=f"vLLM {VLLM} predates PR #46770: its loader is the planted bug itself"),
]

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
LOST = ("sm90-TRITON_ATTN-causal-sink-v2-cubin", "sm100-TRITON_ATTN-noncausal-sink-v2-cubin")
# A request the planted loader does not see: Model Runner V1 builds its own draft config; where the
# release has no V1 (vLLM 0.34.0), DSpark's own loader (load_dspark_model) keeps it.
KEPT = "sm90-TRITON_ATTN-noncausal-sink-v1-cubin" if HAS_V1 else "sm90-TRITON_ATTN-dspark-noncausal-nosink-v2-cubin"
RULE = """
[[expect]]
when = { backend = "TRITON_ATTN", sink = true, loader = "v2" }
vllm = ">=0.25"
verdict = "wrong-backend"
reason = "the v2 loader drops the draft's attention backend"
"""


def _run(matrix: str, report: Path, *pytest_args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    command = [sys.executable, "-m", "harness.cli", "run", matrix, "--report-dir", str(report), "--", *pytest_args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200, check=False)


def test_a_planted_loader_bug_is_an_unrecorded_fault_and_recording_it_without_a_finding_is_refused(
    tmp_path: Path,
) -> None:
    report = tmp_path / "report"
    ran = _run("selection", report, "-k", " or ".join((*LOST, KEPT)), "--plant", f"{prefix_loader.__name__}:plant")
    assert ran.returncode != 0, ran.stdout[-3000:]  # the run fails: a new fault is no expected verdict
    document = json.loads((report / "matrix.json").read_text())
    cells = {cell["id"]: cell for cell in document["cells"]}
    assert sorted(cells) == sorted((*LOST, KEPT))
    for ident in LOST:
        assert (cells[ident]["verdict"], cells[ident]["expected"], cells[ident]["finding"]) == (
            "wrong-backend",
            "pass",
            None,
        )
    assert cells[KEPT]["verdict"] == "pass"
    assert document["summary"]["unrecorded_faults"] == len(LOST), document["summary"]
    markdown = (report / "matrix.md").read_text()
    assert f"{len(LOST)} of them are unrecorded faults: no finding records them (a new bug?)." in markdown
    for ident in LOST:
        row = next(line for line in markdown.splitlines() if f"| {md(ident)} |" in line)  # "Not as expected"
        assert "| wrong-backend | pass | build | unrecorded |" in row, row

    # Recording the new bug as an expected verdict without a finding: refused as the expectations load.
    copy = tmp_path / "matrices"
    shutil.copytree(ROOT / "matrices", copy)
    with (copy / "expectations" / "selection.toml").open("a") as rules:
        rules.write(RULE)
    refused = _run(str(copy / "selection.toml"), tmp_path / "refused", "-k", LOST[0])
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and len(lines) == 1, refused.stderr[-3000:]
    # (`run` is a pytest session: pytest prints its exit message after "Exit: ".)
    assert f"dflash-matrix: {copy / 'expectations' / 'selection.toml'}: expect[" in lines[0]
    assert "].finding: verdict wrong-backend records a fault: name the finding it is" in lines[0]
    assert not (tmp_path / "refused").exists()  # nothing ran
