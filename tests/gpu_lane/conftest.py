"""A fake NVIDIA driver (tests/gpu_lane/fake_libcuda.c) built once per session, so the device
query, the refusal and the worker pinning run on hosts without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SOURCE = Path(__file__).with_name("fake_libcuda.c")


@pytest.fixture(scope="session")
def fake_driver_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a fake ``libcuda.so.1``; put it on LD_LIBRARY_PATH of a subprocess."""
    compiler = shutil.which("gcc")
    assert compiler, "gcc is needed to build the fake NVIDIA driver these tests use"
    folder = tmp_path_factory.mktemp("fake-driver")
    subprocess.run(
        [compiler, "-O2", "-Wall", "-shared", "-fPIC", "-o", str(folder / "libcuda.so.1"), str(SOURCE)], check=True
    )
    return folder


@pytest.fixture(scope="session")
def fake_driver(fake_driver_dir: Path) -> str:
    return str(fake_driver_dir / "libcuda.so.1")
