"""tox's inline plugin: pip's settings reach uv, and a lane env refuses at once, in one line,
what it could never run.

- Every env is built by tox-uv, and uv reads none of pip's settings (pip.conf, `PIP_*`): each
  env's set_env gets what `toxw.uv_environment` translates from them, so an index, extra index
  or find-links given to pip (the cpu lane's `torch==…+cpu` wheel) reaches uv too. A variable
  the user set, or an env's own set_env entry, is never replaced.
- Any env whose command runs a matrix (``--matrix FILE``, the last one given, posargs included)
  checks that file as ``load_matrix`` does, lane contract included, before it installs anything:
  a bad axis, option or value is the same one line ``pytest --matrix`` prints, exit status 2,
  instead of the same line after a 3.5-9 GB install.
- An env that installs vLLM through ``harness/releases/install.py`` (selection, gpu-emulated, gpu,
  bench-selection) gets a directory of its own per chosen vLLM: ``.tox/<env>`` for the default
  release (``[vllm] release`` in tox.ini), ``.tox/<env>-vllm-<version>`` for another release and
  ``.tox/<env>-vllm-<hash>`` for any other requirement or with overrides. tox recreates an env
  whose deps changed, so without this `DFLASH_VLLM_VERSION=0.24.0 tox -e selection` would wipe
  the default ~9 GB env and the next plain run would rebuild it, back and forth.
- `tox -e gpu` refuses at once where no CUDA device is visible. The gpu env installs official
  vLLM (about 9 GB, minutes): a GPU job on a runner without a working driver must go red, fast
  and with one line, never green with everything skipped, and never after a long install. The
  driver is asked directly (``harness/cuda/devices.py``: ctypes only, loaded by path so tox
  needs nothing installed).

When the env is the only one a run sets up, the checks run while tox reads its configuration,
before tox-uv creates the venv (tox has no hook between the two, and `uv venv` prints a line);
the refusal is then the whole output. Beside other envs they fail that env as its first install
step begins, and tox runs and reports the rest.
"""

from __future__ import annotations

import argparse
import configparser
import functools
import hashlib
import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from tox.config.loader.memory import MemoryLoader
from tox.plugin import impl
from tox.tox_env.errors import Fail

GPU_ENV = "gpu"
_VLLM_INSTALLER = "harness/releases/install.py"
_ROOT = Path(__file__).parent
# tox commands that set an env up (legacy is `tox -e NAME` without a subcommand).
_SETTING_UP = frozenset({"run", "r", "run-parallel", "p", "exec", "e", "devenv", "d", "legacy", "le"})


class _Refusal(Exception):
    def __init__(self, line: str, status: int) -> None:
        super().__init__(line)
        self.line, self.status = line, status


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module while the class is built
    spec.loader.exec_module(module)
    return module


@functools.cache
def _uv_environment() -> dict[str, str]:
    environment, untranslated = _load("dflash_matrix_toxw", _ROOT / "toxw.py").current_uv_environment(os.environ)
    for option in untranslated:
        sys.stderr.write(f"toxfile.py: pip's `{option}` setting has no uv variable; it does not apply to tox's envs\n")
    return dict(environment)


@functools.cache
def _default_release() -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(_ROOT / "tox.ini")
    return parser["vllm"]["release"]


def vllm_env_suffix(environ: Mapping[str, str], default_release: str) -> str:
    """The env-directory suffix for the vLLM the DFLASH_VLLM* variables choose ('' = the default)."""
    requirement = environ.get("DFLASH_VLLM") or f"vllm=={environ.get('DFLASH_VLLM_VERSION') or default_release}"
    overrides = environ.get("DFLASH_VLLM_OVERRIDES", "").strip()
    if requirement == f"vllm=={default_release}" and not overrides:
        return ""
    release = requirement.removeprefix("vllm==")
    if overrides or not release.replace(".", "").isalnum():
        return "-vllm-" + hashlib.sha256(f"{requirement}\n{overrides}".encode()).hexdigest()[:12]
    return f"-vllm-{release}"


def _place_vllm_env(env_conf: Any, core: Any) -> None:
    if "install_command" not in env_conf:  # the packaging env (.pkg)
        return
    if not any(str(arg).endswith(_VLLM_INSTALLER) for arg in env_conf["install_command"].args):
        return
    suffix = vllm_env_suffix(os.environ, _default_release())
    if suffix:
        # Ahead of the ini's own loaders, as `tox --force-dep` does (tox/session/cmd/legacy.py).
        # tox puts the env's tmp and log folders under work_dir/<name> by default, not under env_dir.
        env_dir = Path(core["work_dir"]) / f"{env_conf.name}{suffix}"
        dirs = MemoryLoader(env_dir=env_dir, env_tmp_dir=env_dir / "tmp", env_log_dir=env_dir / "log")
        env_conf.loaders.insert(0, dirs)


def _only_env_selected(options: Any, name: str) -> bool:
    selected = options.env
    return not selected.is_all and not selected.is_default_list and list(selected) == [name]


def _matrix_argument(conf: Any) -> str | None:
    """The matrix file the env's commands run: ``dflash-matrix run``'s, or pytest's ``--matrix``
    (the last one given wins, as in pytest). Needs the harness core importable."""
    from harness.bundled import matrix_path
    from harness.commands import run

    found = None
    # tox_on_install also runs for the packaging env (.pkg), which has no commands.
    if "commands" not in conf:
        return None
    for command in conf["commands"]:
        args = [str(arg) for arg in command.args]
        if len(args) > 1 and Path(args[0]).name == "dflash-matrix" and args[1] == "run":
            parser = argparse.ArgumentParser(prog="dflash-matrix run", exit_on_error=False)
            run.add_arguments(parser)
            try:
                found = str(matrix_path(parser.parse_args(args[2:]).matrix))
            except (argparse.ArgumentError, SystemExit):
                return None  # `run` itself says what is wrong with its arguments
        for index, arg in enumerate(args):
            if arg == "--matrix" and index + 1 < len(args):
                found = args[index + 1]
            elif arg.startswith("--matrix="):
                found = arg.partition("=")[2]
    return found


def _check_matrix(conf: Any, core: Any) -> None:
    root = str(core["tox_root"])
    sys.path.insert(0, root)  # the harness core is stdlib-only: tox's interpreter can load a matrix
    try:
        from harness.errors import EXIT_BAD_INPUT, InputError
        from harness.matrix import load_matrix

        matrix = _matrix_argument(conf)
    finally:
        sys.path.remove(root)
    if matrix is None:
        return
    try:
        load_matrix(Path(conf["change_dir"]) / matrix)
    except InputError as error:
        raise _Refusal(f"dflash-matrix: {error.line()}", EXIT_BAD_INPUT) from None


def _check_device(name: str) -> None:
    if name != GPU_ENV:
        return
    devices = _load("dflash_matrix_gpu_devices", _ROOT / "harness" / "cuda" / "devices.py")
    try:
        devices.query_environment()
    except devices.NoDevice as refusal:
        raise _Refusal(refusal.line(), devices.EXIT_NO_DEVICE) from None


def _check(conf: Any, core: Any) -> None:
    _check_matrix(conf, core)
    _check_device(conf.name)


@impl
def tox_add_env_config(env_conf: Any, state: Any) -> None:
    _place_vllm_env(env_conf, state.conf.core)
    env_conf["set_env"].update(_uv_environment(), override=False)
    options = state.conf.options
    listing = getattr(options, "show_config", False) or getattr(options, "list_envs", False)
    if options.command not in _SETTING_UP or listing or not _only_env_selected(options, env_conf.name):
        return
    try:
        _check(env_conf, state.conf.core)
    except _Refusal as refusal:
        # The refusal is the whole answer: tox's own summary lines would only repeat it.
        sys.stderr.write(refusal.line + "\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(refusal.status)


@impl
def tox_on_install(tox_env: Any, arguments: Any, section: str, of_type: str) -> None:
    try:
        _check(tox_env.conf, tox_env.core)
    except _Refusal as refusal:
        raise Fail(refusal.line) from None
