"""The overrides recorded per release (harness/releases/overrides.toml): the shipped file, its bad
inputs refused in one line before anything installs, the choice between recorded and explicit
pins, and the installer applying them without being asked (pip and uv faked, nothing installed)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.releases import install as installer
from harness.releases.install import (
    OVERRIDES_FILE,
    OVERRIDES_VARIABLE,
    OverrideFileError,
    choose_overrides,
    load_overrides,
    parse_overrides,
)

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]
SHIPPED = load_overrides()
GOOD_ENTRY = """
[[override]]
vllm = ["0.34.0"]
pins = ["flashinfer-python==0.7.4"]
fails = "install"
error = "ERROR: No matching distribution found for flashinfer-python==0.7.3"
reason = "the index lacks 0.7.3"
"""


def test_the_shipped_file_records_what_each_release_needed_here() -> None:
    by_release = {release: entry for entry in SHIPPED for release in entry.releases}
    assert set(by_release) == {"0.27.0", "0.27.1", "0.34.0"}
    assert by_release["0.27.1"].pins == ("flashinfer-python==0.6.16.post4",)
    assert by_release["0.27.1"].pythons == ("3.10", "3.11") and by_release["0.27.1"].fails == "import"
    assert by_release["0.34.0"].pins == ("flashinfer-python==0.7.4",) and by_release["0.34.0"].pythons == ()
    assert by_release["0.34.0"].error == "ERROR: No matching distribution found for flashinfer-python==0.7.3"
    assert all(entry.reason for entry in SHIPPED)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("[overrides]\n", "overrides: is not a section of this file (valid: override)"),
        (GOOD_ENTRY + 'note = "x"\n', "override[0].note: is not a field of an override (valid: vllm, python, pins,"),
        (GOOD_ENTRY.replace('reason = "the index lacks 0.7.3"\n', ""), "override[0].reason: is missing"),
        (GOOD_ENTRY.replace('reason = "the index lacks 0.7.3"', 'reason = " "'), "override[0].reason: must be a"),
        (GOOD_ENTRY.replace('"0.34.0"]', '"latest"]'), "override[0].vllm: 'latest' is not valid here"),
        (GOOD_ENTRY.replace('"0.34.0"]', '"0.34"]\npython = ["3"]'), "override[0].python: '3' is not valid here"),
        (GOOD_ENTRY.replace("==0.7.4", ">=0.7.4"), "override[0].pins: 'flashinfer-python>=0.7.4' is not valid"),
        (GOOD_ENTRY.replace('fails = "install"', 'fails = "runtime"'), "'runtime' is not a stage (valid: install"),
        (GOOD_ENTRY.replace('vllm = ["0.34.0"]', 'vllm = "0.34.0"'), "override[0].vllm: must be a non-empty list"),
        (GOOD_ENTRY + GOOD_ENTRY, "override[1].vllm: 0.34.0 already has an override for these Python versions"),
        ("[[override]\n", "cannot be read"),
    ],
)
def test_a_bad_overrides_file_is_one_line_naming_file_key_and_choices(tmp_path: Path, text: str, line: str) -> None:
    path = tmp_path / "overrides.toml"
    path.write_text(text)
    with pytest.raises(OverrideFileError) as raised:
        load_overrides(path)
    assert raised.value.line().startswith(f"{path}: ") and line in raised.value.line()
    assert "\n" not in raised.value.line()


def test_entries_for_one_release_on_different_pythons_are_two_answers_not_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "overrides.toml"
    other_python = GOOD_ENTRY.replace('vllm = ["0.34.0"]', 'vllm = ["0.34.0"]\npython = ["3.11"]')
    path.write_text(other_python + other_python.replace('"3.11"', '"3.12"').replace("0.7.4", "0.7.5"))
    book = load_overrides(path)
    assert choose_overrides("0.34.0", "3.12", None, book).pins == ("flashinfer-python==0.7.5",)


def test_an_explicit_choice_wins_and_says_what_it_replaced() -> None:
    recorded = choose_overrides("0.34.0", "3.11", None, SHIPPED)
    assert (recorded.pins, recorded.source) == (("flashinfer-python==0.7.4",), "recorded")
    assert recorded.describe().startswith("flashinfer-python==0.7.4 (recorded in overrides.toml: it pins")
    mine = choose_overrides("0.34.0", "3.11", parse_overrides("flashinfer-python==0.7.5"), SHIPPED)
    assert (mine.pins, mine.source, mine.replaced) == (("flashinfer-python==0.7.5",), "explicit", recorded.pins)
    assert (
        mine.describe()
        == "flashinfer-python==0.7.5 (given explicitly; the recorded flashinfer-python==0.7.4 not applied)"
    )
    published = choose_overrides("0.34.0", "3.11", parse_overrides("none"), SHIPPED)
    assert (published.pins, published.source) == ((), "explicit") and published.describe().startswith("none (")
    assert choose_overrides("0.33.0", "3.11", None, SHIPPED).describe() == ""
    assert choose_overrides("0.27.0", "3.12", None, SHIPPED).pins == ()  # flashinfer imports there
    assert parse_overrides("") is None and parse_overrides("  ") is None


class FakePip:
    """pip's dry-run report for one vLLM, and every install command, recorded instead of run."""

    def __init__(self, tmp: Path, version: str, requires: list[str]):
        self.tmp, self.version, self.requires = tmp, version, requires
        self.installs: list[list[str]] = []

    def resolve(self, python: str, options: Any, requirements: Any) -> list[dict[str, Any]]:
        if not any(str(r).startswith("vllm") for r in requirements):
            return [{"metadata": {"name": "dflash-matrix", "version": "0.1.0", "requires_dist": ["packaging"]}}]
        return [{"metadata": {"name": "vllm", "version": self.version, "requires_dist": self.requires}}]

    def run(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        if command[1:3] == ["-c", "import sys; print(sys.prefix)"]:
            return subprocess.CompletedProcess(command, 0, f"{self.tmp}\n", "")
        self.installs.append(command)
        return subprocess.CompletedProcess(command, 0, "", "")


@pytest.fixture
def pip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePip:
    fake = FakePip(tmp_path, "0.34.0", ["torch==2.14.0", "flashinfer-python==0.7.3", "numpy"])
    monkeypatch.setattr(installer, "resolve_metadata", fake.resolve)
    monkeypatch.setattr(installer.subprocess, "run", fake.run)
    monkeypatch.setattr(installer, "installer", lambda python: ["uv", "pip", "install"])
    return fake


def test_the_installer_applies_the_recorded_pins_and_records_where_they_came_from(tmp_path: Path, pip: FakePip) -> None:
    assert installer.install("python", ["vllm==0.34.0"], None, SHIPPED, "3.11") == 0
    # vLLM without its dependencies, then its requirements with the recorded pin in place of its own.
    assert pip.installs[0][-2:] == ["--no-deps", "vllm==0.34.0"]
    assert "flashinfer-python==0.7.4" in pip.installs[1] and "flashinfer-python==0.7.3" not in pip.installs[1]
    record = json.loads((tmp_path / installer.INSTALL_RECORD).read_text())
    assert record["overrides"] == ["flashinfer-python==0.7.4"] and record["overrides_source"] == "recorded"
    assert "0.7.3" in record["overrides_reason"]


def test_the_installer_installs_a_release_as_published_when_told_none(tmp_path: Path, pip: FakePip) -> None:
    assert installer.install("python", ["vllm==0.34.0"], (), SHIPPED, "3.11") == 0
    assert len(pip.installs) == 1 and pip.installs[0][-1] == "vllm==0.34.0"
    record = json.loads((tmp_path / installer.INSTALL_RECORD).read_text())
    assert record["overrides"] == [] and record["overrides_replaced"] == ["flashinfer-python==0.7.4"]


def test_the_harness_package_install_gets_no_vllm_overrides(tmp_path: Path, pip: FakePip) -> None:
    assert installer.install("python", ["dflash-matrix@/build/dflash_matrix.whl"], None, SHIPPED, "3.11") == 0
    assert len(pip.installs) == 1 and not (tmp_path / installer.INSTALL_RECORD).exists()


def test_a_bad_choice_or_file_stops_the_installer_before_anything_installs(
    tmp_path: Path, pip: FakePip, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(OVERRIDES_VARIABLE, "flashinfer-python>=0.7")
    assert installer.main(["vllm==0.34.0"]) == 2
    assert "not an exact pin" in capsys.readouterr().err
    monkeypatch.delenv(OVERRIDES_VARIABLE)
    bad = tmp_path / "overrides.toml"
    bad.write_text(GOOD_ENTRY.replace('reason = "the index lacks 0.7.3"\n', ""))
    monkeypatch.setattr(installer, "load_overrides", lambda: load_overrides(bad))
    assert installer.main(["vllm==0.34.0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"dflash-matrix: {bad}: override[0].reason: is missing: every override names it"]
    assert pip.installs == []


def _toxfile() -> Any:
    spec = importlib.util.spec_from_file_location("dflash_matrix_toxfile_under_test", REPO / "toxfile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_a_tox_lane_env_of_an_overridden_release_is_named_by_its_recorded_pins() -> None:
    pytest.importorskip("tox")
    toxfile = _toxfile()

    def suffix(**environ: str) -> str:
        return str(toxfile.vllm_env_suffix(environ, "0.33.0", toxfile._recorded_pins))

    # The recorded pins name the env as the same explicit pins would: one env for one install.
    assert suffix(DFLASH_VLLM_VERSION="0.34.0") == suffix(
        DFLASH_VLLM_VERSION="0.34.0", DFLASH_VLLM_OVERRIDES="flashinfer-python==0.7.4"
    )
    assert suffix(DFLASH_VLLM_VERSION="0.34.0").startswith("-vllm-") and suffix(DFLASH_VLLM_VERSION="0.34.0") != (
        suffix(DFLASH_VLLM_VERSION="0.34.0", DFLASH_VLLM_OVERRIDES="none")
    )
    assert (suffix(), suffix(DFLASH_VLLM_VERSION="0.31.0")) == ("", "-vllm-0.31.0")
    # The default release keeps the plain name with its recorded pins (0.34.0 records some), and
    # only with them: explicit other pins are another install, another env.
    recorded = toxfile._recorded_pins("0.34.0")
    assert recorded
    assert toxfile.vllm_env_suffix({}, "0.34.0", toxfile._recorded_pins) == ""
    assert toxfile.vllm_env_suffix({"DFLASH_VLLM_OVERRIDES": recorded}, "0.34.0", toxfile._recorded_pins) == ""
    assert toxfile.vllm_env_suffix({"DFLASH_VLLM_OVERRIDES": "none"}, "0.34.0", toxfile._recorded_pins).startswith(
        "-vllm-"
    )


def test_a_default_env_installed_with_other_pins_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("tox")
    toxfile = _toxfile()
    record = tmp_path / installer.INSTALL_RECORD
    pins = "flashinfer-python==0.7.4"
    assert toxfile.install_pins_refusal(tmp_path, "vllm==0.34.0", pins) is None  # nothing installed yet
    record.write_text(json.dumps({"requirements": ["vllm==0.34.0"], "overrides": [pins]}))
    assert toxfile.install_pins_refusal(tmp_path, "vllm==0.34.0", pins) is None
    line = toxfile.install_pins_refusal(tmp_path, "vllm==0.34.0", "")
    assert line is not None and "rebuild it (tox -r)" in line and "\n" not in line
    record.write_text(json.dumps({"requirements": ["vllm==0.34.0"], "overrides": []}))
    assert toxfile.install_pins_refusal(tmp_path, "vllm==0.34.0", "none") is None
    assert toxfile.install_pins_refusal(tmp_path, "vllm==0.34.0", pins) is not None
    # Another release in the env (the default moved on): tox recreates it for its changed deps itself.
    record.write_text(json.dumps({"requirements": ["vllm==0.33.0"], "overrides": []}))
    assert toxfile.install_pins_refusal(tmp_path, "vllm==0.34.0", pins) is None
    assert str(OVERRIDES_FILE).endswith(toxfile.INSTALLER.replace("install.py", "overrides.toml"))
