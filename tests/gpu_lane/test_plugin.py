"""harness.plugins.gpu through real pytest runs (subprocesses) against a fake NVIDIA driver:
the one-line refusal, worker -> GPU pinning that reaches the cell processes, and the cells of
the visible GPU generation only. The fake lane stands in for vLLM; no verdict here is a GPU's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from reliability.planted import matrix_pytest_argv, write_fake_matrix

from harness.cuda.devices import REFUSAL

from .fake_driver import fake_driver_env

pytestmark = pytest.mark.process

H100 = "NVIDIA H100 80GB HBM3:9.0"
A100 = "NVIDIA A100-SXM4-80GB:8.0"


def _run(matrix: Path, report_dir: Path, env: dict[str, str], *extra: str) -> subprocess.CompletedProcess[str]:
    argv = matrix_pytest_argv(matrix, report_dir, "-p", "harness.plugins.gpu", *extra)
    return subprocess.run(argv, cwd=matrix.parent, env=env, capture_output=True, text=True, timeout=180, check=False)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_no_device_is_one_line_and_nothing_runs(tmp_path: Path, fake_driver_dir: Path) -> None:
    # A driver that finds no device, ahead of any real one on the loader path: the same on
    # hosts with and without a GPU.
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=["9.0"])
    done = _run(matrix, tmp_path / "reports", fake_driver_env(fake_driver_dir, ""))
    assert done.returncode == 1
    assert _lines(done.stdout + done.stderr) == [
        f"Exit: {REFUSAL}: the NVIDIA driver reports none (CUDA_VISIBLE_DEVICES is unset)"
    ]
    assert not (tmp_path / "reports").exists()


def test_hidden_devices_are_refused(tmp_path: Path, fake_driver_dir: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=["9.0"])
    done = _run(matrix, tmp_path / "reports", fake_driver_env(fake_driver_dir, H100, visible=""))
    assert done.returncode == 1
    assert _lines(done.stdout + done.stderr) == [
        f"Exit: {REFUSAL}: the NVIDIA driver reports none (CUDA_VISIBLE_DEVICES='')"
    ]


def test_mixed_generations_are_refused(tmp_path: Path, fake_driver_dir: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=["9.0"])
    done = _run(matrix, tmp_path / "reports", fake_driver_env(fake_driver_dir, f"{H100};{A100}"))
    assert done.returncode == 1
    (line,) = _lines(done.stdout + done.stderr)
    assert "several GPU generations" in line and "NVIDIA A100-SXM4-80GB (SM 8.0" in line


def test_a_generation_the_matrix_lacks_is_refused(tmp_path: Path, fake_driver_dir: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=["8.0", "10.0"])
    done = _run(matrix, tmp_path / "reports", fake_driver_env(fake_driver_dir, H100))
    assert done.returncode == 2
    (line,) = _lines(done.stdout + done.stderr)
    assert line.startswith(f"Exit: {matrix}: axes.capability: the visible GPUs (NVIDIA H100 80GB HBM3)")
    assert line.endswith("(valid: 8.0, 10.0)")


def test_each_worker_and_its_cell_processes_get_one_gpu(tmp_path: Path, fake_driver_dir: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN", "B_ATTN", "C_ATTN"], capabilities=["9.0"])
    pins = tmp_path / "pins"
    pins.mkdir()
    env = fake_driver_env(fake_driver_dir, f"{H100};{H100};{H100}", visible="2,0", DFLASH_TEST_PIN_DIR=str(pins))
    done = _run(matrix, tmp_path / "reports", env, "-n", "3", "--plant", "gpu_lane.plants:record_visible_devices")
    assert done.returncode == 0, done.stdout + done.stderr
    seen = {path.read_text() for path in pins.iterdir()}
    # Two devices visible to the run ("2,0"), three workers: gw2 shares the first device.
    assert seen == {"gw0=2", "gw1=0", "gw2=2"}


def test_only_this_generations_cells_run(tmp_path: Path, fake_driver_dir: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "m", ["A_ATTN"], capabilities=["8.0", "9.0", "10.0"])
    report_dir = tmp_path / "reports"
    done = _run(matrix, report_dir, fake_driver_env(fake_driver_dir, f"{H100};{H100}"), "-n", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "(compute capability 9.0): 4 cells for this generation, 8 cells of other generations" in done.stdout
    # Before any cell: what FlashInfer will compile on first use (harness.cuda.flashinfer_jit).
    assert "dflash-matrix gpu: flashinfer: " in done.stdout
    cells = json.loads((report_dir / "matrix.json").read_text())["cells"]
    assert sorted(cell["id"] for cell in cells) == [
        "sm90-A_ATTN-causal-nosink",
        "sm90-A_ATTN-causal-sink",
        "sm90-A_ATTN-noncausal-nosink",
        "sm90-A_ATTN-noncausal-sink",
    ]


def test_the_plugin_is_pytest_only(tmp_path: Path) -> None:
    """The plugin module imports neither torch nor vLLM: the worker that loads it must not
    initialise CUDA before it has pinned its device."""
    probe = "import sys, harness.plugins.gpu; print(sorted(m for m in ('torch', 'vllm') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
