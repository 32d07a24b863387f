"""Every recorded release is re-measured by one command (and one Actions job per release)."""

from __future__ import annotations

import json

import pytest

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import expectations_for
from harness.matrix import load_matrix

pytestmark = pytest.mark.pure


def test_history_plans_one_job_per_release_the_expectations_record(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "selection", "--recorded", "--plan"]) == 0
    plan = json.loads(capsys.readouterr().out)
    recorded = [str(r) for r in expectations_for(load_matrix(matrix_path("selection"))).releases]
    assert [job["release"] for job in plan["include"]] == recorded
    assert {"0.24.0", "0.33.0", "0.34.0"} <= set(recorded)


def test_recorded_and_a_range_together_are_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["history", "selection", "--recorded", "--old", "0.24.0", "--plan"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--recorded" in err[0]
