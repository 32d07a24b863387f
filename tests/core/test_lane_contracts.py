"""Each lane's contract (harness/contracts/lanes.py) refuses a matrix the lane cannot run in the
parent, before any cell process starts: one line naming file, key and valid choices, exit status
2, nothing written. Shown for every lane through `pytest --matrix` and `dflash-matrix cells`, and
for the lanes with a tox env through the real `tox -e <lane>` (which refuses before it installs).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.contracts.lanes import CONTRACTS, LANES
from harness.errors import EXIT_BAD_INPUT, InputError
from harness.matrix import load_matrix

REPO = Path(__file__).resolve().parents[2]
TOX = shutil.which("tox")

# The axes every matrix of the lane has, then what each mistake adds.
BASE_AXES = {
    "cpu": 'backend = ["CPU_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "gpu": 'capability = ["9.0"]\nbackend = ["FLASH_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "gpu_emulated": 'capability = ["9.0"]\nbackend = ["TRITON_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "selection": 'capability = ["9.0"]\nbackend = ["auto"]\ncausal = [true]\nsink = [true]\n',
    "fake": 'backend = ["A_ATTN"]\ncausal = [true]\nsink = [true]\n',
    "fake_gpu": 'capability = ["9.0"]\nbackend = ["A_ATTN"]\ncausal = [true]\nsink = [true]\n',
}
BAD_VALUES = {
    "cpu": ("seed = 1.5", "options.seed", "1.5 is not an integer >= 0"),
    "gpu": ("head_dim = 4", "options.head_dim", "4 is not an integer >= 8"),
    "gpu_emulated": ('sm_counts = { "9.0" = 0 }', "options.sm_counts", "is not a table of capability = number of SMs"),
    "selection": ("target_backend = 7", "options.target_backend", "7 is not a backend name"),
    "fake": ('actions = { "A_ATTN-causal-sink" = "explode" }', "options.actions", "'explode' is not allowed"),
    "fake_gpu": ("sleep_s = -1", "options.sleep_s", "-1 is not a number of seconds"),
}
# An axis (or an axis value) the lane cannot run; the fake lane varies every axis.
CANNOT_VARY = {
    "cpu": ('capability = ["9.0"]', "axes.capability", "the cpu lane cannot vary this axis"),
    "gpu": ("flashinfer_cubin = [true]", "axes.flashinfer_cubin", "the gpu lane cannot vary this axis"),
    "gpu_emulated": ("flashinfer_cubin = [true]", "axes.flashinfer_cubin", "the gpu_emulated lane cannot vary"),
    "selection": ("sliding_window = [0, 16]", "axes.sliding_window", "16: the selection lane builds no windowed draft"),
}


def _cases() -> list[tuple[str, str, str, str, str, str]]:
    """(lane, mistake, extra axes, options, key, problem)."""
    cases = []
    for lane in LANES:
        names = ", ".join(CONTRACTS[lane].option_names)
        cases.append((lane, "unknown-option", "", "warp_speed = 9", "options.warp_speed", f"(valid: {names})"))
        line, key, problem = BAD_VALUES[lane]
        cases.append((lane, "bad-option-value", "", line, key, problem))
        cases.append((lane, "unknown-axis", 'flavour = ["x"]', "", "axes.flavour", "unknown axis"))
        if lane in CANNOT_VARY:
            axis, key, problem = CANNOT_VARY[lane]
            cases.append((lane, "axis-the-lane-cannot-vary", axis, "", key, problem))
    return cases


CASES = _cases()
IDS = [f"{lane}-{mistake}" for lane, mistake, *_ in CASES]


def _write(folder: Path, lane: str, axes: str, options: str) -> Path:
    path = folder / "bad.toml"
    text = f'[matrix]\nname = "bad"\nlane = "{lane}"\n[axes]\n{BASE_AXES[lane]}{axes}\n'
    path.write_text(text + (f"[options]\n{options}\n" if options else ""))
    return path


def _expect_one_line(text: str, path: Path, key: str, problem: str) -> None:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert f"dflash-matrix: {path}: {key}: " in lines[0]
    assert problem in lines[0]


@pytest.mark.parametrize(("lane", "mistake", "axes", "options", "key", "problem"), CASES, ids=IDS)
def test_loading_the_matrix_refuses_it(tmp_path: Path, lane, mistake, axes, options, key, problem) -> None:
    with pytest.raises(InputError) as refused:
        load_matrix(_write(tmp_path, lane, axes, options))
    assert refused.value.key == key
    assert problem in refused.value.line()


@pytest.mark.parametrize(("lane", "mistake", "axes", "options", "key", "problem"), CASES, ids=IDS)
def test_dflash_matrix_cells_refuses_it(tmp_path, capsys, lane, mistake, axes, options, key, problem) -> None:
    path = _write(tmp_path, lane, axes, options)
    assert main(["cells", str(path)]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == ""
    _expect_one_line(err, path, key, problem)


@pytest.mark.parametrize(("lane", "mistake", "axes", "options", "key", "problem"), CASES, ids=IDS)
def test_pytest_matrix_refuses_it_before_any_cell_process(tmp_path, lane, mistake, axes, options, key, problem):
    path = _write(tmp_path, lane, axes, options)
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
    _expect_one_line(done.stdout + done.stderr, path, key, problem)
    # Nothing ran and nothing was written; the last run's report is left as it was.
    assert sorted(p.name for p in reports.iterdir()) == ["matrix.json"]
    assert (reports / "matrix.json").read_text() == "the last run's report"


# One mistake per lane env (the check is the same load_matrix for all; each tox run costs ~2 s).
TOX_CASES = [
    case
    for case in CASES
    if (case[0], case[1])
    in {("cpu", "axis-the-lane-cannot-vary"), ("selection", "unknown-option"), ("gpu", "bad-option-value")}
]


@pytest.mark.skipif(TOX is None, reason="the tox command is not on PATH")
@pytest.mark.parametrize(
    ("lane", "mistake", "axes", "options", "key", "problem"), TOX_CASES, ids=[f"{c[0]}-{c[1]}" for c in TOX_CASES]
)
def test_tox_refuses_it_before_installing(tmp_path, lane, mistake, axes, options, key, problem) -> None:
    """`tox -e <lane> -- --matrix BAD` (pytest keeps the last --matrix): toxfile.py checks the
    matrix as its first install step begins, so neither vLLM nor the harness is installed."""
    path = _write(tmp_path, lane, axes, options)
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
    _expect_one_line(done.stderr, path, key, problem)
    assert list(work.glob(f"{lane}/lib/python*/site-packages/vllm*")) == []
    assert list(work.glob(f"{lane}/lib/python*/site-packages/pytest")) == []


def test_every_option_carries_its_check_and_help() -> None:
    for contract in CONTRACTS.values():
        for declared in dataclasses.fields(contract.options):
            assert callable(declared.metadata.get("check")), (contract.name, declared.name)
            assert declared.metadata.get("help"), (contract.name, declared.name)
        # The defaults are what an empty [options] table gives, and pass their own checks.
        assert contract.read_options(Path("m.toml"), {}) == contract.options()


def test_shipped_matrices_are_accepted_by_their_lanes() -> None:
    for path in sorted((REPO / "matrices").glob("*.toml")):
        matrix = load_matrix(path)
        assert matrix.lane_options == matrix.contract.read_options(path, matrix.options)


def test_the_contracts_import_neither_vllm_nor_torch() -> None:
    code = (
        "import sys, harness.contracts.lanes, harness.matrix, harness.cli; "
        "loaded = sorted(m for m in ('torch', 'vllm') if m in sys.modules); "
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
