"""The refusal of a bad matrix reaches the user from every entry path, end to end, in a process of
its own: ``pytest --matrix`` (before any cell process starts, nothing written), ``tox -e <lane>``
(before it installs anything) and the ``dflash-matrix`` console script (no traceback). Each case
is one lane's; what every lane refuses is checked in-process by test_lane_contracts.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.contracts.lanes import LANES
from harness.errors import EXIT_BAD_INPUT

from .lane_mistakes import CASES, expect_one_line, write_bad_matrix
from .samples import BASIC_MATRIX, write

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
TOX = shutil.which("tox")

# Per lane the one mistake that proves its entry path; the kinds differ so each crosses a boundary once.
PYTEST_CASES = {
    ("cpu", "axis-the-lane-cannot-vary"),
    ("gpu", "bad-option-value"),
    ("gpu_emulated", "unknown-axis"),
    ("fake", "bad-option-value"),
    ("fake_gpu", "unknown-option"),
}
# The selection lane's through tox, the entry path its CI job takes (toxfile.py checks the matrix
# as its first install step begins; the check is the same load_matrix for every lane env).
TOX_CASES = {("selection", "unknown-option")}


def _chosen(chosen: set[tuple[str, str]]) -> list[tuple[str, str, str, str, str, str]]:
    return [case for case in CASES if (case[0], case[1]) in chosen]


def test_every_lane_has_one_end_to_end_case() -> None:
    lanes = sorted(lane for lane, _ in PYTEST_CASES | TOX_CASES)
    assert lanes == sorted(LANES)
    assert len(_chosen(PYTEST_CASES | TOX_CASES)) == len(LANES)


@pytest.mark.parametrize(
    ("lane", "mistake", "axes", "options", "key", "problem"),
    _chosen(PYTEST_CASES),
    ids=[f"{c[0]}-{c[1]}" for c in _chosen(PYTEST_CASES)],
)
def test_pytest_matrix_refuses_it_before_any_cell_process(tmp_path, lane, mistake, axes, options, key, problem):
    path = write_bad_matrix(tmp_path, lane, axes, options)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "matrix.json").write_text("the last run's report")
    argv = [sys.executable, "-m", "pytest", "-c", "pytest.ini", "-p", "no:cacheprovider", "-n", "2"]
    done = subprocess.run(
        [*argv, "--matrix", str(path), "--report-dir", str(reports)],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_BAD_INPUT, done.stdout + done.stderr
    expect_one_line(done.stdout + done.stderr, path, key, problem)
    # Nothing ran and nothing was written; the last run's report is left as it was.
    assert sorted(p.name for p in reports.iterdir()) == ["matrix.json"]
    assert (reports / "matrix.json").read_text() == "the last run's report"


@pytest.mark.skipif(TOX is None, reason="the tox command is not on PATH")
@pytest.mark.parametrize(
    ("lane", "mistake", "axes", "options", "key", "problem"),
    _chosen(TOX_CASES),
    ids=[f"{c[0]}-{c[1]}" for c in _chosen(TOX_CASES)],
)
def test_tox_refuses_it_before_installing(tmp_path, lane, mistake, axes, options, key, problem) -> None:
    """`tox -e <lane> -- --matrix BAD` (pytest keeps the last --matrix): neither vLLM nor the
    harness is installed."""
    path = write_bad_matrix(tmp_path, lane, axes, options)
    work = tmp_path / "work"
    assert TOX is not None
    done = subprocess.run(
        [TOX, "-c", str(REPO / "tox.ini"), "--workdir", str(work), "-e", lane, "--", "--matrix", str(path)],
        env={k: v for k, v in os.environ.items() if not k.startswith(("TOX_", "PYTEST_", "VIRTUAL_ENV"))},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == EXIT_BAD_INPUT, done.stdout + done.stderr
    assert done.stdout == ""
    expect_one_line(done.stderr, path, key, problem)
    assert list(work.glob(f"{lane}/lib/python*/site-packages/vllm*")) == []
    assert list(work.glob(f"{lane}/lib/python*/site-packages/pytest")) == []


def test_console_script_exits_2_without_traceback(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.toml", BASIC_MATRIX.replace('"cpu"', '"tpu"'))
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "cells", str(bad)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stdout == ""
    lanes = "cpu, selection, gpu, gpu_emulated, fake, fake_gpu"
    assert done.stderr == f"dflash-matrix: {bad}: matrix.lane: 'tpu' is not a lane (valid: {lanes})\n"


def test_the_contracts_import_neither_vllm_nor_torch() -> None:
    """In a fresh interpreter: the parent checks every matrix without loading a lane's heavy imports."""
    code = (
        "import sys, harness.contracts.lanes, harness.matrix, harness.cli; "
        "loaded = sorted(m for m in ('torch', 'vllm') if m in sys.modules); "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
