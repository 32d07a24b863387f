"""The one line about FlashInfer's first-use compilation, for each case flashinfer-python
0.7.2.post1's own lookup distinguishes (``harness.cuda.flashinfer_jit``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cuda import flashinfer_jit

pytestmark = pytest.mark.pure


def _nvcc(folder: Path) -> Path:
    nvcc = folder / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("")
    return nvcc


def test_cuda_home_wins_then_path_then_nothing(tmp_path: Path) -> None:
    home = _nvcc(tmp_path / "home")
    on_path = _nvcc(tmp_path / "path")
    assert flashinfer_jit.nvcc_path({"CUDA_HOME": str(home.parents[1])}, lambda _: str(on_path)) == str(home)
    assert flashinfer_jit.nvcc_path({"CUDA_PATH": str(home.parents[1])}, lambda _: None) == str(home)
    assert flashinfer_jit.nvcc_path({}, lambda _: str(on_path)) == str(on_path)
    # CUDA_HOME set but without nvcc: FlashInfer does not look further, nor does this.
    assert flashinfer_jit.nvcc_path({"CUDA_HOME": str(tmp_path / "empty")}, lambda _: str(on_path)) is None


def test_each_case_is_one_line(tmp_path: Path) -> None:
    nvcc = _nvcc(tmp_path / "cuda")
    env = {"CUDA_HOME": str(nvcc.parents[1]), "FLASHINFER_WORKSPACE_BASE": str(tmp_path)}
    compiles = flashinfer_jit.status(env, lambda _: None, lambda _: False)
    assert compiles.startswith(
        f"flashinfer: no prebuilt kernels; the first cell of each FlashInfer module compiles it with {nvcc}"
    )
    assert str(tmp_path / ".cache" / "flashinfer") in compiles
    assert "nothing compiles" in flashinfer_jit.status(env, lambda _: None, lambda name: name == "flashinfer_jit_cache")
    missing = flashinfer_jit.status({"CUDA_HOME": str(tmp_path / "none")}, lambda _: None, lambda _: False)
    assert "no nvcc" in missing and "will crash" in missing
    for line in (compiles, missing):
        assert "\n" not in line
