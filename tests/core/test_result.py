"""The cell record (matrix.json cells[] contract): what decide() produces and how it reads back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from harness.expectations import Expectation
from harness.matrix import expand
from harness.observation import Claim
from harness.result import CellResult, decide
from harness.stages import Stage
from harness.verdict import ClaimGap, Outcome, Verdict

from .samples import CONTRACT_KEYS, OBSERVATIONS, matrix_from, ran, result

pytestmark = pytest.mark.pure


def test_record_carries_the_contract_and_reads_back(tmp_path: Path) -> None:
    cells = expand(matrix_from(tmp_path))
    for verdict in Verdict:
        for expected in (verdict, Verdict.PASS):
            record = result(cells[4], verdict, expected, claim=Claim(True, ("all shapes",)))
            data = json.loads(json.dumps(record.to_json()))
            assert data.keys() >= CONTRACT_KEYS
            assert data["axes"] == {"backend": "FLASH_ATTN", "causal": True, "sink": True, "dtype": "bfloat16"}
            assert data["verdict"] == verdict.value and data["expected"] == expected.value
            assert CellResult.from_json(data) == record


def test_decide_fills_tolerance_from_the_cell_and_records_the_claim_gap(tmp_path: Path) -> None:
    cell = expand(matrix_from(tmp_path))[0]
    observation = ran("CPU_ATTN", claim=Claim(False, ("sinks unsupported",)))
    record = decide(cell, observation, Expectation(Verdict.PASS, "works"))
    assert record.tolerance == 0.02  # from the matrix's bfloat16 tolerance
    assert record.claim_gap == ClaimGap.UNDER_CLAIM
    assert record.outcome == Outcome.MATCH and record.ok
    assert record.expected_reason == "works"


def test_nan_error_survives_the_round_trip(tmp_path: Path) -> None:
    cell = expand(matrix_from(tmp_path))[0]
    record = decide(cell, ran("CPU_ATTN", max_abs_err=float("nan"), tolerance=0.1), Expectation(Verdict.PASS, "x"))
    data = record.to_json()
    assert data["max_abs_err"] == "nan"
    json.dumps(data, allow_nan=False)
    back = CellResult.from_json(data)
    assert back.verdict == Verdict.MISMATCH and back.max_abs_err is not None and math.isnan(back.max_abs_err)


def test_crash_keeps_its_stage(tmp_path: Path) -> None:
    cell = expand(matrix_from(tmp_path))[0]
    record = decide(cell, OBSERVATIONS[Verdict.CRASH], Expectation(Verdict.PASS, "x"))
    assert (record.stage, record.outcome) == (Stage.FORWARD, Outcome.REGRESSION)
    assert record.to_json()["stage"] == "forward"
