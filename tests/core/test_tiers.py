"""Every test module declares exactly one tier (tests/conftest.py), and a module that needs vLLM
lives in a lane's folder, which that lane's tox env runs by folder (a lane folder may also hold
pure checks of the lane's own logic; `tox -e unit` picks those by tier)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.pure

TESTS = Path(__file__).resolve().parents[1]
# The folders whose modules need a lane's vLLM (tox.ini's lane envs run them by folder).
LANE_FOLDERS = {"attention", "cpu_lane", "selection_lane", "gpu_emulated"}
MODULES = sorted(TESTS.rglob("test_*.py"))


@pytest.fixture
def tiers(pytestconfig: pytest.Config) -> ModuleType:
    """The root conftest as this session loaded it (it is no package module to import)."""
    conftest = pytestconfig.pluginmanager.get_plugin(str(TESTS / "conftest.py"))
    assert isinstance(conftest, ModuleType)
    return conftest


def _tiers(tiers: ModuleType, path: Path) -> set[str]:
    return set(tiers.module_marks(path)) & set(tiers.TIERS)


def test_every_test_module_has_exactly_one_tier(tiers: ModuleType) -> None:
    assert len(MODULES) > 50
    found = {str(path.relative_to(TESTS)): sorted(_tiers(tiers, path)) for path in MODULES}
    assert {module: marks for module, marks in found.items() if len(marks) != 1} == {}


def test_vllm_modules_live_in_the_lane_folders_only(tiers: ModuleType) -> None:
    folders = {str(p.relative_to(TESTS)): p.relative_to(TESTS).parts[0] for p in MODULES if "vllm" in _tiers(tiers, p)}
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
def test_the_tier_is_read_from_the_source(tiers: ModuleType, tmp_path: Path, text: str, marks: set[str]) -> None:
    path = tmp_path / "test_planted.py"
    path.write_text(text)
    assert tiers.module_marks(path) == marks
