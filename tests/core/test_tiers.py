"""Every test module declares exactly one tier (tests/conftest.py), and a module that needs vLLM
lives in a lane's folder, which that lane's tox env runs by folder (a lane folder may also hold
pure checks of the lane's own logic; `tox -e unit` picks those by tier)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytestmark = pytest.mark.pure

TESTS = Path(__file__).resolve().parents[1]
# The folders whose modules need a lane's vLLM (tox.ini's lane envs run them by folder).
LANE_FOLDERS = {"attention", "cpu_lane", "selection_lane", "gpu_emulated"}


def _conftest():  # type: ignore[no-untyped-def]
    # The root conftest is no package module; load it by path, as pytest does.
    spec = importlib.util.spec_from_file_location("tiers_conftest", TESTS / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TIERS_CONFTEST = _conftest()
MODULES = sorted(TESTS.rglob("test_*.py"))


def _tiers(path: Path) -> set[str]:
    return set(TIERS_CONFTEST.module_marks(path)) & set(TIERS_CONFTEST.TIERS)


def test_every_test_module_has_exactly_one_tier() -> None:
    assert len(MODULES) > 50
    assert {str(p.relative_to(TESTS)): sorted(_tiers(p)) for p in MODULES if len(_tiers(p)) != 1} == {}


def test_vllm_modules_live_in_the_lane_folders_only() -> None:
    folders = {str(p.relative_to(TESTS)): p.relative_to(TESTS).parts[0] for p in MODULES if "vllm" in _tiers(p)}
    assert {module: folder for module, folder in folders.items() if folder not in LANE_FOLDERS} == {}


@pytest.mark.parametrize(
    ("text", "marks"),
    [
        ("import pytest\n\npytestmark = pytest.mark.pure\n", {"pure"}),
        ("pytestmark = [pytest.mark.vllm, pytest.mark.e2e]\n", {"vllm", "e2e"}),
        ('pytestmark = (pytest.mark.process, pytest.mark.skipif(True, reason="x"))\n', {"process", "skipif"}),
        ("def test_x():\n    pytestmark = pytest.mark.pure\n", set()),  # not the module's
        ("import pytest\n", set()),
    ],
)
def test_the_tier_is_read_from_the_source(tmp_path: Path, text: str, marks: set[str]) -> None:
    path = tmp_path / "test_planted.py"
    path.write_text(text)
    assert TIERS_CONFTEST.module_marks(path) == marks
