"""The environment of a subprocess that sees the fake CUDA driver (``fake_libcuda.c``): its
devices, the worker's visible ones, and this checkout's harness and test helpers importable."""

from __future__ import annotations

import os
from pathlib import Path

from reliability.planted import inner_env

REPO = Path(__file__).resolve().parents[2]


def fake_driver_env(driver_dir: Path, devices: str, visible: str | None = None, **extra: str) -> dict[str, str]:
    env = inner_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["LD_LIBRARY_PATH"] = str(driver_dir)
    env["FAKE_CUDA_DEVICES"] = devices
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = visible
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), str(REPO), env.get("PYTHONPATH", "")])
    return {**env, **extra}
