#!/usr/bin/env python3
"""Run this project's tox from any Python 3.11+: `python3 toxw.py [tox arguments]`.

README.md's two commands and .ci/run call this. It keeps tox and the tox-uv plugin in a venv
of its own (`.tox/.toxw`, made on the first call, reused while the interpreter and the
requirements below are unchanged) and hands over to that tox. Nothing is installed into the
Python that runs it, so a distribution's own python3 that is marked externally managed
(PEP 668: Debian 12+, Ubuntu 23.04+, where `pip install` refuses) works like a pyenv or venv
Python. The venv is made with `uv` when one is on PATH, else with this Python's pip (or, on
a Python without pip, its ensurepip); tox-uv then builds every tox env with uv.

uv reads none of pip's settings (pip.conf files, `PIP_*` variables), yet users point pip at
their index, extra indexes and find-links (the cpu lane's `torch==…+cpu` wheel lives on
PyTorch's CPU index). `uv_environment` translates pip's effective install settings into the
`UV_*` (and TLS/proxy) variables uv reads; the bootstrap here and every tox env (through
toxfile.py) use it. A variable already set in the environment is never replaced, and
`DFLASH_UV_FROM_PIP=0` turns the translation off for users who configure uv themselves.
Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

REQUIREMENTS = ("tox>=4.20", "tox-uv>=1.37")
VENV = Path(__file__).resolve().parent / ".tox" / ".toxw"
EMPTY_INDEX = VENV.parent / ".no-index"
_STAMP = "toxw.json"
EXIT_USAGE = 2

# pip option -> the uv variable taking the same value, and how uv joins a list of them.
_LISTS = {
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "trusted-host": ("UV_INSECURE_HOST", " "),
}
_SCALARS = {
    "index-url": "UV_INDEX_URL",
    "timeout": "UV_HTTP_TIMEOUT",
    "default-timeout": "UV_HTTP_TIMEOUT",
    "keyring-provider": "UV_KEYRING_PROVIDER",
    # uv reads the standard TLS and proxy variables, not options of its own.
    "cert": "SSL_CERT_FILE",
    "client-cert": "SSL_CLIENT_CERT",
    "proxy": "HTTPS_PROXY",
}
_FLAGS = {
    "pre": ("UV_PRERELEASE", "allow"),
    "require-hashes": ("UV_REQUIRE_HASHES", "1"),
    "no-build-isolation": ("UV_NO_BUILD_ISOLATION", "1"),
}
# pip settings that change what gets installed but that uv takes only on its command line.
UNTRANSLATABLE = ("no-binary", "only-binary", "prefer-binary")
# A user who sets any of these chose uv's indexes: pip's index settings stay out of the way.
_UV_INDEX_VARIABLES = ("UV_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX", "UV_EXTRA_INDEX_URL")
_INDEX_OPTIONS = ("index-url", "extra-index-url", "find-links", "no-index")


def pip_config_files(environ: Mapping[str, str], home: Path, prefix: Path) -> list[Path]:
    """pip's configuration files, lowest precedence first (pip's `Configuration` order:
    global, user, site, then the file named by PIP_CONFIG_FILE; os.devnull there means none)."""
    named = environ.get("PIP_CONFIG_FILE")
    if named == os.devnull:
        return []
    xdg_dirs = environ.get("XDG_CONFIG_DIRS") or "/etc/xdg"
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs.split(os.pathsep) if d]
    files.append(Path("/etc/pip.conf"))
    if not (named and Path(named).exists()):
        user_dir = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
        files += [home / ".pip" / "pip.conf", user_dir / "pip" / "pip.conf"]
    files.append(prefix / "pip.conf")
    if named:
        files.append(Path(named))
    return files


def pip_install_settings(environ: Mapping[str, str], config_texts: Iterable[str]) -> dict[str, str]:
    """What `pip install` would use, option name -> raw value: the files' `[global]`, then their
    `[install]` sections (a section outranks any file, as in pip), then `PIP_*` variables."""
    by_section: dict[str, dict[str, str]] = {"global": {}, "install": {}}
    for text in config_texts:
        parser = configparser.RawConfigParser()
        parser.read_string(text)
        for section, values in by_section.items():
            if parser.has_section(section):
                values.update({_option(name): value for name, value in parser.items(section)})
    settings = {**by_section["global"], **by_section["install"]}
    settings.update({_option(key[4:]): value for key, value in environ.items() if key.startswith("PIP_")})
    return settings


def uv_environment(
    settings: Mapping[str, str],
    environ: Mapping[str, str],
    empty_index: Path,
    exists: Callable[[str], bool] = os.path.exists,
) -> dict[str, str]:
    """The variables that make uv install as pip would with `settings`, less any already set.

    `empty_index` is a folder with nothing in it: uv (0.13) has no variable for pip's
    `--no-index`, so an index that lists no package stands in for PyPI there.
    """
    if environ.get("DFLASH_UV_FROM_PIP", "1") == "0":
        return {}
    if any(name in environ for name in _UV_INDEX_VARIABLES):
        settings = {key: value for key, value in settings.items() if key not in _INDEX_OPTIONS}
    elif _truthy(settings.get("no-index", "")):
        settings = {key: value for key, value in settings.items() if key not in ("index-url", "extra-index-url")}
        settings["index-url"] = empty_index.as_uri()
    out: dict[str, str] = {}
    for option, value in settings.items():
        if option in _LISTS:
            name, separator = _LISTS[option]
            items = value.split()
            if option == "find-links":
                # pip skips a find-links folder that does not exist; uv would stop on it.
                items = [item for item in items if "://" in item or exists(item)]
            if items:
                out[name] = separator.join(items)
        elif option in _SCALARS and value:
            out[_SCALARS[option]] = value
        elif option in _FLAGS and _truthy(value):
            out[_FLAGS[option][0]] = _FLAGS[option][1]
    if "UV_HTTP_TIMEOUT" in out and not out["UV_HTTP_TIMEOUT"].isdigit():
        out["UV_HTTP_TIMEOUT"] = str(round(float(out["UV_HTTP_TIMEOUT"])))
    if "HTTPS_PROXY" in out:
        out["HTTP_PROXY"] = out["HTTPS_PROXY"]
    if "UV_EXTRA_INDEX_URL" in out or "UV_FIND_LINKS" in out:
        # pip takes the best version from all its locations alike; uv's default takes a package
        # only from the first index that has it (so `lark==1.2.2` would not be found on PyPI
        # once a local mirror lists an older lark). Same trust as pip, no less, no more.
        out["UV_INDEX_STRATEGY"] = "unsafe-best-match"
    return {name: value for name, value in out.items() if name not in environ}


def untranslated(settings: Mapping[str, str]) -> list[str]:
    return [option for option in UNTRANSLATABLE if settings.get(option)]


def current_uv_environment(environ: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """`uv_environment` for this process: pip's settings as pip itself would find them."""
    files = pip_config_files(environ, Path.home(), Path(sys.prefix))
    texts = [path.read_text(encoding="utf-8") for path in files if path.is_file()]
    settings = pip_install_settings(environ, texts)
    environment = uv_environment(settings, environ, EMPTY_INDEX)
    if environment.get("UV_INDEX_URL") == EMPTY_INDEX.as_uri():
        EMPTY_INDEX.mkdir(parents=True, exist_ok=True)
    return environment, untranslated(settings)


def _option(name: str) -> str:
    return name.lower().replace("_", "-").removeprefix("--")


def _truthy(value: str) -> bool:
    return value.strip().lower() in {"1", "true", "yes", "on", "y", "t"}


def _stamp() -> dict[str, object]:
    return {"python": sys.executable, "version": sys.version, "requirements": list(REQUIREMENTS)}


def _is_current(venv: Path) -> bool:
    try:
        return bool(json.loads((venv / _STAMP).read_text(encoding="utf-8")) == _stamp())
    except (OSError, ValueError):
        return False


def _run(command: list[str], env: Mapping[str, str] | None = None) -> None:
    done = subprocess.run(command, env=env, stdout=sys.stderr, check=False)
    if done.returncode != 0:
        raise SystemExit(f"toxw.py: `{' '.join(command)}` failed (exit {done.returncode})")


def _has_module(name: str) -> bool:
    found = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True, check=False)
    return found.returncode == 0


def build(venv: Path) -> None:
    """tox and tox-uv into `venv`: with uv if one is on PATH, else through this Python's pip."""
    shutil.rmtree(venv, ignore_errors=True)
    python = venv / "bin" / "python"
    uv_env, _ = current_uv_environment(os.environ)
    env = {**os.environ, **uv_env}
    uv = shutil.which("uv")
    if uv is None:
        # pip (itself honouring pip's settings) installs uv alone; uv then installs the rest in a
        # fraction of pip's time. This Python's own pip drives the venv's install (`--python`),
        # which a PEP 668 mark does not stop, so the venv needs no ensurepip.
        if _has_module("pip"):
            _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
            _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "uv"], env)
        elif _has_module("ensurepip"):
            _run([sys.executable, "-m", "venv", str(venv)])
            _run([str(python), "-m", "pip", "install", "--quiet", "uv"], env)
        else:
            raise SystemExit(
                f"toxw.py: {sys.executable} has neither pip nor ensurepip and no uv is on PATH; install one "
                "(Debian/Ubuntu: apt install python3-pip, or python3-venv)",
            )
        uv = str(venv / "bin" / "uv")
    else:
        _run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], env)
    _run([uv, "pip", "install", "--quiet", "--python", str(python), *REQUIREMENTS], env)
    (venv / _STAMP).write_text(json.dumps(_stamp()), encoding="utf-8")


def main(argv: list[str]) -> None:
    # The first thing a new user runs: an older python3 gets one line, not a traceback.
    if sys.version_info < (3, 11):  # noqa: UP036
        sys.stderr.write(f"toxw.py: {sys.executable} is Python {sys.version.split()[0]}; 3.11 or newer is required\n")
        raise SystemExit(EXIT_USAGE)
    if not _is_current(VENV):
        sys.stderr.write(f"toxw.py: installing {' '.join(REQUIREMENTS)} into {VENV}\n")
        build(VENV)
    tox = VENV / "bin" / "tox"
    os.execv(tox, [str(tox), *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
