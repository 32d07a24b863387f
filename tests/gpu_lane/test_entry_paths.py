"""One entry path for the gpu lanes: `dflash-matrix run` loads the plugins a lane's contract names.

tox.ini's gpu env runs `dflash-matrix run` and gpu-matrix.yml runs `tox -e gpu` (both checked
below). Here `dflash-matrix run` (harness.cli, a subprocess) and the way tox ran the gpu lane
before (`pytest -p harness.plugins.gpu --matrix ...`) run one fake_gpu matrix (the fake lane,
whose contract names the gpu plugin as the gpu lane's does) against a fake NVIDIA driver: the same
refusals, the same cells with the same verdicts, and the same GPU for each worker. A plugin that
forgets to pin a worker or to deselect another generation's cells fails these checks.
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from reliability.planted import inner_env, matrix_pytest_argv, write_fake_matrix

from harness.bundled import matrix_path
from harness.cuda.devices import REFUSAL
from harness.matrix import expand, load_matrix

from .fake_driver import fake_driver_env

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
H100 = "NVIDIA H100 80GB HBM3:9.0"
A100 = "NVIDIA A100-SXM4-80GB:8.0"
CAPABILITIES = ["8.0", "9.0", "10.0"]
# Verdicts of every kind the runner tells apart, on this generation's cells and another's.
ACTIONS = {
    "sm90-A_ATTN-causal-sink": "mismatch",
    "sm90-B_ATTN-noncausal-nosink": "unavailable",
    "sm90-B_ATTN-causal-sink": "abort",
    "sm100-A_ATTN-causal-nosink": "segfault",
}
SM90_CELLS = sorted(
    f"sm90-{backend}-{causal}-{sink}"
    for backend in ("A_ATTN", "B_ATTN")
    for causal in ("causal", "noncausal")
    for sink in ("sink", "nosink")
)

Path_ = Callable[[Path, Path, dict[str, str], tuple[str, ...]], subprocess.CompletedProcess[str]]


def _by_run(
    matrix: Path, report_dir: Path, env: dict[str, str], extra: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "harness.cli", "run", "--report-dir", str(report_dir), str(matrix), *extra]
    return subprocess.run(argv, cwd=matrix.parent, env=env, capture_output=True, text=True, timeout=180, check=False)


def _by_pytest_p(
    matrix: Path, report_dir: Path, env: dict[str, str], extra: tuple[str, ...]
) -> subprocess.CompletedProcess[str]:
    argv = matrix_pytest_argv(matrix, report_dir, "-p", "harness.plugins.gpu", *extra)
    return subprocess.run(argv, cwd=matrix.parent, env=env, capture_output=True, text=True, timeout=180, check=False)


PATHS: dict[str, Path_] = {"dflash-matrix run": _by_run, "pytest -p harness.plugins.gpu": _by_pytest_p}


def _exit_line(done: subprocess.CompletedProcess[str]) -> str:
    (line,) = [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("Exit: ")]
    return line


@pytest.mark.parametrize(
    ("devices", "visible", "listed", "status", "line"),
    [
        ("", None, ["9.0"], 1, f"Exit: {REFUSAL}: the NVIDIA driver reports none (CUDA_VISIBLE_DEVICES is unset)"),
        (H100, "", ["9.0"], 1, f"Exit: {REFUSAL}: the NVIDIA driver reports none (CUDA_VISIBLE_DEVICES='')"),
        (f"{H100};{A100}", None, ["9.0"], 1, "Exit: CUDA devices of several GPU generations visible: 2 CUDA device"),
        (H100, None, ["8.0", "10.0"], 2, "Exit: {matrix}: axes.capability: the visible GPUs (NVIDIA H100 80GB HBM3)"),
    ],
    ids=["no-device", "devices-hidden", "mixed-generations", "generation-not-listed"],
)
def test_both_paths_refuse_in_the_same_line_before_any_cell(
    tmp_path: Path, fake_driver_dir: Path, devices: str, visible: str | None, listed: list[str], status: int, line: str
) -> None:
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=listed, lane="fake_gpu")
    env = fake_driver_env(fake_driver_dir, devices, visible)
    outcomes = {}
    for name, path in PATHS.items():
        done = path(matrix, tmp_path / name, env, ())
        assert done.returncode == status, done.stdout + done.stderr
        assert _exit_line(done).startswith(line.format(matrix=matrix))
        assert not (tmp_path / name / "journal").exists()
        outcomes[name] = _exit_line(done)
    assert len(set(outcomes.values())) == 1, outcomes


def _gpu_runner(
    path: Path_, tmp_path: Path, driver_dir: Path, *extra: str, **env: str
) -> tuple[int, list[tuple[str, str, str]], set[str], str]:
    """Three workers on a runner whose visible GPUs are "2,0" of three H100s; the matrix lists
    SM80, SM90 and SM100. Returns (exit status, (cell, verdict, expected), worker pins, stdout)."""
    tmp_path.mkdir(exist_ok=True)
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN", "B_ATTN"], ACTIONS, capabilities=CAPABILITIES, lane="fake_gpu")
    pins = tmp_path / "pins"
    pins.mkdir()
    environ = fake_driver_env(driver_dir, f"{H100};{H100};{H100}", visible="2,0", DFLASH_TEST_PIN_DIR=str(pins), **env)
    plant = ("--plant", "gpu_lane.plants:record_visible_devices")
    done = path(matrix, tmp_path / "reports", environ, ("-n", "3", *plant, *extra))
    assert done.returncode in (0, 1), done.stdout + done.stderr
    cells = json.loads((tmp_path / "reports" / "matrix.json").read_text())["cells"]
    verdicts = sorted((cell["id"], cell["verdict"], cell["expected"]) for cell in cells)
    return done.returncode, verdicts, {pin.read_text() for pin in pins.iterdir()}, done.stdout


def _check_runner(verdicts: list[tuple[str, str, str]], pins: set[str], stdout: str) -> None:
    """What a GPU runner's run must show: this generation's cells only, one GPU per worker."""
    ran = [ident for ident, _, _ in verdicts]
    assert ran == SM90_CELLS, f"cells of other generations ran here: {sorted(set(ran) - set(SM90_CELLS))}"
    # Two devices visible ("2,0"), three workers: gw2 shares the first one. Each cell process
    # inherits its worker's pin.
    assert pins == {"gw0=2", "gw1=0", "gw2=2"}, f"workers not pinned to one GPU each: {sorted(pins)}"
    assert "(compute capability 9.0): 8 cells for this generation, 16 cells of other generations" in stdout
    assert "dflash-matrix gpu: CUDA_VISIBLE_DEVICES per worker: gw0=2, gw1=0, gw2=2" in stdout


def test_both_paths_run_the_same_cells_with_the_same_verdicts_on_the_same_gpus(
    tmp_path: Path, fake_driver_dir: Path
) -> None:
    outcomes = {}
    for name, path in PATHS.items():
        status, verdicts, pins, stdout = _gpu_runner(path, tmp_path / name.replace(" ", "_"), fake_driver_dir)
        _check_runner(verdicts, pins, stdout)
        outcomes[name] = (status, verdicts, pins)
    by_run, by_pytest = outcomes.values()
    assert by_run == by_pytest
    status, verdicts, _ = by_run
    assert status == 1  # the planted faults are regressions: expected pass everywhere
    assert {verdict for _, verdict, _ in verdicts} == {"pass", "mismatch", "unavailable", "crash"}


def test_dflash_matrix_run_gpu_is_the_shipped_gpu_matrix_under_the_gpu_plugin(
    tmp_path: Path, fake_driver_dir: Path
) -> None:
    """`dflash-matrix run gpu` itself, against two fake H100s: the cells tox's former command
    (`pytest -p harness.plugins.gpu --matrix matrices/gpu.toml`) selects, with the same verdicts
    (without vLLM here each cell's process fails to start, the same on both paths) and the same
    GPU per worker, as its summary says."""
    shipped = matrix_path("gpu")
    cells = expand(load_matrix(shipped))
    here = sum(1 for cell in cells if cell.get("capability") == "9.0")
    env = fake_driver_env(fake_driver_dir, f"{H100};{H100}")
    picked = ("-n", "2", "-k", "FLASH_ATTN-causal-nosink-bf16-v2 and not graph")
    by_run = _cli("run", "--report-dir", str(tmp_path / "run"), "gpu", *picked, cwd=tmp_path, **env)
    # Not matrix_pytest_argv: it writes its ini file beside the matrix, here the repository's matrices/.
    (tmp_path / "inner-pytest.ini").write_text("[pytest]\n")
    argv = [sys.executable, "-m", "pytest", "-c", str(tmp_path / "inner-pytest.ini"), "--rootdir", str(tmp_path)]
    argv += ["-p", "no:cacheprovider", "-p", "harness.plugins.gpu", str(shipped), "--matrix", str(shipped)]
    argv += ["--report-dir", str(tmp_path / "pytest"), *picked]
    by_pytest = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180, check=False)
    outcomes = []
    for name, done in (("run", by_run), ("pytest", by_pytest)):
        assert f"(compute capability 9.0): {here} cells for this generation, {len(cells) - here} cells" in done.stdout
        assert "dflash-matrix gpu: CUDA_VISIBLE_DEVICES per worker: gw0=0, gw1=1" in done.stdout
        report = json.loads((tmp_path / name / "matrix.json").read_text())["cells"]
        outcomes.append((done.returncode, sorted((cell["id"], cell["verdict"], cell["expected"]) for cell in report)))
    assert outcomes[0] == outcomes[1]
    assert [ident for ident, _, _ in outcomes[0][1]] == [
        "sm90-FLASH_ATTN-causal-nosink-bf16-v2",
        "sm90-TRITON_FLASH_ATTN-causal-nosink-bf16-v2",
    ]


@pytest.mark.parametrize(
    ("forget", "caught"), [("pin", "workers not pinned"), ("deselect", "cells of other generations ran here")]
)
def test_a_forgetful_gpu_plugin_fails_the_runner_checks(
    tmp_path: Path, fake_driver_dir: Path, forget: str, caught: str
) -> None:
    _, verdicts, pins, stdout = _gpu_runner(
        _by_run, tmp_path, fake_driver_dir, "-p", "gpu_lane.forgetful_gpu_plugin", DFLASH_TEST_FORGET=forget
    )
    with pytest.raises(AssertionError, match=caught):
        _check_runner(verdicts, pins, stdout)


def test_tox_and_the_workflow_run_the_gpu_lane_through_dflash_matrix_run() -> None:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(REPO / "tox.ini")
    (command,) = tox["testenv:gpu"]["commands"].strip().splitlines()
    assert command.split()[:2] == ["dflash-matrix", "run"] and "matrices/gpu.toml" in command.split()
    assert "-p" not in command.split(), "the gpu contract names the plugin; tox must not name it again"
    workflow = (REPO / ".github" / "workflows" / "gpu-matrix.yml").read_text()
    assert 'python toxw.py -e gpu -- -n "$gpus"' in workflow


def test_a_gpu_matrix_without_its_plugin_is_refused(tmp_path: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=["9.0"], lane="fake_gpu")
    done = subprocess.run(
        matrix_pytest_argv(matrix, tmp_path / "reports"),
        cwd=tmp_path,
        env=inner_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert _exit_line(done) == (
        f"Exit: dflash-matrix: {matrix}: matrix.lane: the fake_gpu lane runs under the pytest plugin "
        f"harness.plugins.gpu: run it with `dflash-matrix run {matrix}`, which loads it "
        "(or pass -p harness.plugins.gpu)"
    )


def _cli(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **inner_env(),
        "PYTHONPATH": os.pathsep.join([str(REPO), inner_env().get("PYTHONPATH", "")]),
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


@pytest.mark.parametrize("lane", ["gpu", "fake_gpu"])
def test_only_the_gpu_emulated_lane_believes_in_emulated_gpus(tmp_path: Path, fake_driver_dir: Path, lane: str) -> None:
    """A real gpu run given --emulated-gpus is refused before it asks the driver anything: no
    cell of a real GPU lane is ever judged on a device that is not there."""
    fake = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=["9.0"], lane="fake_gpu")
    matrix = "gpu" if lane == "gpu" else str(fake)
    done = _cli("run", matrix, "--emulated-gpus", "1x9.0", cwd=tmp_path, LD_LIBRARY_PATH=str(fake_driver_dir))
    assert done.returncode == 2, done.stdout + done.stderr
    assert _exit_line(done) == (
        f"Exit: --emulated-gpus: only the gpu_emulated lane runs on emulated GPUs; "
        f"the {lane} lane counts the devices the NVIDIA driver reports"
    )
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize(
    ("given", "problem"),
    [
        ((), "the gpu_emulated lane runs one GPU generation per run, as a GPU runner does: say which, and how many"),
        (("--emulated-gpus", "2xnine"), "'2xnine' is not NxCAPABILITY (N >= 1 GPUs of that compute capability)"),
        (("--emulated-gpus", "0x9.0"), "'0x9.0' is not NxCAPABILITY (N >= 1 GPUs of that compute capability)"),
    ],
    ids=["missing", "not-a-spec", "no-gpus"],
)
def test_the_gpu_emulated_lane_needs_one_emulated_generation(
    tmp_path: Path, given: tuple[str, ...], problem: str
) -> None:
    done = _cli("run", "gpu-emulated", *given, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert _exit_line(done).startswith(f"Exit: --emulated-gpus: {problem}")
    assert _exit_line(done).endswith(" (valid: 1x9.0, 1x10.0)")


@pytest.mark.parametrize(("runner", "token", "elsewhere"), [("2x9.0", "sm90", 48), ("2x10.0", "sm100", 111)])
def test_gpu_emulated_runs_one_generation_per_run_with_its_workers_pinned(
    tmp_path: Path, runner: str, token: str, elsewhere: int
) -> None:
    """The shipped gpu-emulated matrix as tox runs each shard, on its CUDA-binary cells (their
    verdicts need vLLM: without it here they crash; in the gpu-emulated env they are unavailable)."""
    report_dir = tmp_path / token
    done = _cli(
        "run", "-n", "2", "--report-dir", str(report_dir), "gpu-emulated", "--emulated-gpus", runner,
        "-k", "(FLASH_ATTN-causal or FLASHINFER-causal) and not dheads", cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    cells = json.loads((report_dir / "matrix.json").read_text())["cells"]
    assert sorted(cell["id"] for cell in cells) == [
        f"{token}-FLASHINFER-causal-nosink-bf16-v2",
        f"{token}-FLASH_ATTN-causal-nosink-bf16-v2",
    ]
    generation = runner.partition("x")[2]
    assert f"(compute capability {generation}): {159 - elsewhere} cells for this generation, {elsewhere} cells" in (
        done.stdout
    )
    assert "dflash-matrix gpu: CUDA_VISIBLE_DEVICES per worker: gw0=0, gw1=1" in done.stdout
