"""tox's inline plugin: a lane env refuses at once, in one line, what it could never run.

- Any env whose command runs a matrix (``--matrix FILE``, the last one given, posargs included)
  checks that file as ``load_matrix`` does, lane contract included, before it installs anything:
  a bad axis, option or value is the same one line ``pytest --matrix`` prints, exit status 2,
  instead of the same line after a 3.5-9 GB install.
- `tox -e gpu` refuses at once where no CUDA device is visible.

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


def _only_env_selected(tox_env: Any, name: str) -> bool:
    selected = tox_env.options.env
    return not selected.is_all and not selected.is_default_list and list(selected) == [name]


def _refuse(tox_env: Any, line: str, status: int) -> None:
    if _only_env_selected(tox_env, tox_env.name):
        # The refusal is the whole answer: tox's own summary lines would only repeat it.
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(status)
    # Beside other envs, fail this one and let tox run and report the rest.
    raise Fail(line)


def _matrix_argument(tox_env: Any) -> str | None:
    """The matrix file the env's commands run (pytest keeps the last ``--matrix``)."""
    found = None
    # tox_on_install also runs for the packaging env (.pkg), which has no commands.
    if "commands" not in tox_env.conf:
        return None
    for command in tox_env.conf["commands"]:
        args = [str(arg) for arg in command.args]
        for index, arg in enumerate(args):
            if arg == "--matrix" and index + 1 < len(args):
                found = args[index + 1]
            elif arg.startswith("--matrix="):
                found = arg.partition("=")[2]
    return found


def _check_matrix(tox_env: Any) -> None:
    matrix = _matrix_argument(tox_env)
    if matrix is None:
        return
    root = str(tox_env.core["tox_root"])
    sys.path.insert(0, root)  # the harness core is stdlib-only: tox's interpreter can load a matrix
    try:
        from harness.errors import EXIT_BAD_INPUT, InputError
        from harness.matrix import load_matrix
    finally:
        sys.path.remove(root)
    try:
        load_matrix(Path(tox_env.conf["change_dir"]) / matrix)
    except InputError as error:
        _refuse(tox_env, f"dflash-matrix: {error.line()}", EXIT_BAD_INPUT)


@impl
def tox_on_install(tox_env: Any, arguments: Any, section: str, of_type: str) -> None:
    _check_matrix(tox_env)
    if tox_env.name != GPU_ENV:
        return
    devices = _gpu_devices()
    try:
        devices.query_environment()
    except devices.NoDevice as refusal:
        _refuse(tox_env, refusal.line(), devices.EXIT_NO_DEVICE)
