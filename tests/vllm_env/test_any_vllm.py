"""Running where the user's vLLM is: shipped matrices by name, `dflash-matrix run`, the stub
driver built by the harness, and the run object naming exactly which vLLM ran."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.bundled import matrix_path, shipped_matrices
from harness.cuda import stub_driver
from harness.releases import provenance as vllm_release

pytestmark = pytest.mark.process

ROOT = Path(__file__).resolve().parents[2]

PASSING_FAKE = """
[matrix]
name = "fake-ok"
lane = "fake"
timeout_s = 30
[axes]
backend = ["A_ATTN"]
causal = [true, false]
sink = [true]
"""


def test_shipped_matrices_are_found_by_lane_name() -> None:
    assert {"cpu", "selection", "gpu"} <= set(shipped_matrices())
    assert matrix_path("selection") == ROOT / "matrices" / "selection.toml"
    assert matrix_path("matrices/cpu.toml") == Path("matrices/cpu.toml")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env_path = {"PYTHONPATH": str(ROOT)}
    import os

    return subprocess.run(
        [sys.executable, "-m", "harness.cli", *args],
        cwd=cwd,
        env={**os.environ, **env_path},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_run_writes_the_same_reports_as_a_pytest_session(tmp_path: Path) -> None:
    matrix = tmp_path / "fake-ok.toml"
    matrix.write_text(PASSING_FAKE)
    # The current folder's own pytest configuration must not leak in: a vLLM checkout has one.
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = --this-option-does-not-exist\n")
    (tmp_path / "test_not_mine.py").write_text("def test_fails():\n    raise AssertionError\n")
    done = _cli("run", str(matrix), "--report-dir", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert report["summary"]["ok"] is True and len(report["cells"]) == 2
    assert {(tmp_path / "out" / name).exists() for name in ("junit.xml", "matrix.md")} == {True}


def test_run_of_an_unknown_lane_is_one_line(tmp_path: Path) -> None:
    done = _cli("run", "selectoin", cwd=tmp_path)
    assert done.returncode == 2
    shipped = ", ".join(shipped_matrices())
    assert done.stderr.strip().splitlines() == [
        f"dflash-matrix: selectoin: is neither a matrix file nor a shipped matrix (valid: {shipped})"
    ]


def test_the_stub_driver_is_built_once_into_the_cache_and_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DFLASH_CACHE_DIR", str(tmp_path))
    built = stub_driver.build_stub()
    assert built.parent.parent == tmp_path and built.name == "libcuda.so.1"
    assert hasattr(ctypes.CDLL(str(built)), "dflash_matrix_libcuda_stub")
    stamp = built.stat().st_mtime_ns
    assert stub_driver.build_stub() == built and built.stat().st_mtime_ns == stamp
    assert [p.name for p in built.parent.iterdir()] == ["libcuda.so.1"]  # no scratch left behind


def test_without_gcc_the_stub_is_one_clear_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DFLASH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(stub_driver.shutil, "which", lambda name: None)
    with pytest.raises(stub_driver.StubBuildError) as caught:
        stub_driver.build_stub()
    assert str(caught.value).startswith("gcc not found: the selection lane compiles its stub libcuda.so.1")


class _Dist:
    def __init__(self, version: str, direct_url: dict[str, Any] | None):
        self.version = version
        self._direct = direct_url

    def read_text(self, name: str) -> str | None:
        return json.dumps(self._direct) if name == "direct_url.json" and self._direct is not None else None


@pytest.mark.parametrize(
    ("version", "direct", "expected"),
    [
        ("0.33.0", None, {}),
        (
            "0.33.0",
            {"url": "file:///wheels/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", "archive_info": {}},
            {"vllm_source": "file:///wheels/vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"},
        ),
        (
            "0.34.0.dev12+g1a2b3c4d",
            {"url": "file:///src/vllm", "dir_info": {"editable": True}},
            {"vllm_source": "editable file:///src/vllm", "vllm_commit": "1a2b3c4d"},
        ),
        (
            "0.34.0",
            {"url": "https://github.com/vllm-project/vllm", "vcs_info": {"vcs": "git", "commit_id": "abc123def"}},
            {"vllm_source": "https://github.com/vllm-project/vllm", "vllm_commit": "abc123def"},
        ),
    ],
)
def test_the_run_object_names_the_wheel_path_or_commit(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    version: str,
    direct: dict[str, Any] | None,
    expected: dict[str, str],
) -> None:
    monkeypatch.setattr(vllm_release.importlib.metadata, "distribution", lambda name: _Dist(version, direct))
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    assert vllm_release.vllm_provenance() == expected
    (tmp_path / "dflash-vllm-install.json").write_text(
        json.dumps({"requirements": ["vllm==0.34.0"], "overrides": ["flashinfer-python==0.7.4"]})
    )
    recorded = vllm_release.vllm_provenance()
    assert recorded["vllm_requirement"] == "vllm==0.34.0"
    assert recorded["vllm_overrides"] == "flashinfer-python==0.7.4"
    (tmp_path / "dflash-vllm-install.json").write_text(
        json.dumps(
            {
                "requirements": ["vllm==0.34.0"],
                "overrides": ["flashinfer-python==0.7.4"],
                "overrides_source": "recorded",
                "overrides_reason": "it pins flashinfer-python==0.7.3, which the package index does not serve",
                "overrides_replaced": [],
            }
        )
    )
    recorded = vllm_release.vllm_provenance()
    assert (recorded["vllm_overrides"], recorded["vllm_overrides_source"]) == ("flashinfer-python==0.7.4", "recorded")
    assert recorded["vllm_overrides_reason"].startswith("it pins flashinfer-python==0.7.3")
    assert "vllm_overrides_replaced" not in recorded


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["sm90-NOPE", "--old", "0.24.0", "--new", "0.33.0"], "no cell 'sm90-NOPE' in this matrix"),
        (["sm90-TRITON_ATTN-causal-sink-v2-cubin", "--old", "0.33.0", "--new", "0.24.0"], "0.33.0 is not older than"),
        (
            ["sm90-TRITON_ATTN-causal-sink-v2-cubin", "--old", "latest", "--new", "0.33.0"],
            "'latest' is not a vLLM version",
        ),
        (["sm90-TRITON_ATTN-causal-sink-v2-cubin", "--old", "0.24.0"], "both are needed"),
    ],
)
def test_bisect_bad_input_is_one_line_before_any_install(tmp_path: Path, args: list[str], fragment: str) -> None:
    done = _cli("bisect", "selection", *args, "--cache", str(tmp_path / "cache"), cwd=tmp_path)
    assert done.returncode == 2 and fragment in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "cache").exists()
