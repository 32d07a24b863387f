"""tox's inline plugin: `tox -e gpu` refuses at once where no CUDA device is visible.

The gpu env installs official vLLM (about 9 GB, minutes). A GPU job on a runner without a
working driver must go red, fast and with one line, never green with everything skipped, and
never after a long install. This hook runs in tox's own interpreter as the env's first
install step begins, before any package is installed, and asks the NVIDIA driver directly
(``harness/gpu_devices.py``: ctypes only, loaded by path so tox needs nothing installed).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from tox.plugin import impl
from tox.tox_env.errors import Fail

GPU_ENV = "gpu"
_DEVICES_MODULE = Path(__file__).parent / "harness" / "gpu_devices.py"


def _gpu_devices() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dflash_matrix_gpu_devices", _DEVICES_MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(module)
    return module


def _only_env_selected(tox_env: Any) -> bool:
    selected = tox_env.options.env
    return not selected.is_all and not selected.is_default_list and list(selected) == [GPU_ENV]


@impl
def tox_on_install(tox_env: Any, arguments: Any, section: str, of_type: str) -> None:
    if tox_env.name != GPU_ENV:
        return
    devices = _gpu_devices()
    try:
        devices.query_environment()
    except devices.NoDevice as refusal:
        if _only_env_selected(tox_env):
            # The refusal is the whole answer: tox's own summary lines would only repeat it.
            sys.stderr.write(refusal.line() + "\n")
            sys.stderr.flush()
            sys.stdout.flush()
            os._exit(devices.EXIT_NO_DEVICE)
        # Beside other envs, fail this one and let tox run and report the rest.
        raise Fail(refusal.line()) from None
