"""diff: what changed between two reports, and an exit status CI can gate on."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.reports.diff import Change, diff_reports, load_report
from harness.result import CellResult

from .shards import DEFAULT_ENV, cell, write_journal, write_shard

pytestmark = pytest.mark.pure

NEXT_NIGHT = {**DEFAULT_ENV, "vllm_version": "0.34.0.dev1"}


def _diff(tmp_path: Path, before: list, after: list, **after_journal: object) -> tuple[int, dict]:
    old = write_shard(tmp_path / "old", before)
    new = write_shard(tmp_path / "new", after, **after_journal)
    out = tmp_path / "diff.json"
    status = main(["diff", str(old), str(new / "matrix.json"), "--json", str(out), "--md", str(tmp_path / "d.md")])
    return status, json.loads(out.read_text())


def _kinds(data: dict) -> dict[str, str]:
    return {change["id"]: change["kind"] for change in data["changes"]}


def test_identical_reports_exit_0(tmp_path: Path) -> None:
    cells = [cell(), cell(sink=True, verdict="unsupported")]
    status, data = _diff(tmp_path, cells, cells)
    assert status == 0 and data["changes"] == [] and data["counts"]["unchanged"] == 2


def test_a_new_failure_on_a_new_nightly_of_the_same_machine_exits_1(tmp_path: Path) -> None:
    before = [cell(), cell("TRITON_ATTN", sink=True)]
    after = [cell(), cell("TRITON_ATTN", sink=True, verdict="crash", expected="pass", message="CUDA error")]
    status, data = _diff(tmp_path, before, after, env=NEXT_NIGHT)
    assert status == 1 and data["regressed"] is True
    (change,) = data["changes"]
    assert change["kind"] == "new-failure" and change["after"]["message"] == "CUDA error"
    # The same machine on a newer vLLM is paired, not reported as one run gone and one new.
    assert data["runs"][0]["baseline"].endswith("vllm 0.33.0 / torch 2.14.0")
    assert data["runs"][0]["current"].endswith("vllm 0.34.0.dev1 / torch 2.14.0")
    assert "New failures" in (tmp_path / "d.md").read_text()


def test_a_worse_verdict_regresses_even_when_the_expectation_followed_it(tmp_path: Path) -> None:
    status, data = _diff(tmp_path, [cell()], [cell(verdict="unsupported")])
    assert status == 1 and _kinds(data) == {cell().id: "worse"}


def test_fixes_better_and_sideways_changes_do_not_regress(tmp_path: Path) -> None:
    before = [
        cell("A", verdict="crash", expected="pass"),
        cell("B", verdict="unsupported"),
        cell("C", verdict="unsupported"),
    ]
    after = [cell("A"), cell("B"), cell("C", verdict="unavailable")]
    status, data = _diff(tmp_path, before, after)
    assert status == 0
    assert _kinds(data) == {cell("A").id: "fixed", cell("B").id: "better", cell("C").id: "changed"}


def test_a_disappeared_cell_gates_unless_missing_cells_are_allowed(tmp_path: Path) -> None:
    status, data = _diff(tmp_path, [cell("A"), cell("B")], [cell("A"), cell("C")])
    assert status == 1
    assert _kinds(data) == {cell("B").id: "disappeared", cell("C").id: "appeared"}
    assert main(["diff", str(tmp_path / "old"), str(tmp_path / "new"), "--allow-missing"]) == 0


def test_an_empty_current_report_fails_the_gate(tmp_path: Path) -> None:
    status, data = _diff(tmp_path, [cell("A"), cell("B")], [])
    assert status == 1 and data["regressed"] is True


def test_a_cell_that_matched_and_is_now_planned_but_not_run_regresses(tmp_path: Path) -> None:
    old = write_shard(tmp_path / "old", [cell("A"), cell("B")])
    new = tmp_path / "new"
    write_journal(new / "journal" / "gw0.jsonl", [cell("A")], planned=[cell("A").id, cell("B").id], ended=False)
    assert main(["report", str(new / "journal"), "--out", str(new)]) == 0
    diff = diff_reports(load_report(old), load_report(new))
    assert [(c.kind, c.cell_id) for c in diff.changes] == [(Change.NOT_RUN, cell("B").id)]
    assert diff.regressed


def test_side_by_side_versions_pair_by_full_key(tmp_path: Path) -> None:
    # A baseline merged from two vLLM versions on one machine, against a newer merge of both.
    write_shard(tmp_path / "a33", [cell()])
    newer = {**DEFAULT_ENV, "vllm_version": "0.34.0"}
    write_shard(tmp_path / "a34", [cell(verdict="crash", expected="crash")], env=newer)
    write_shard(tmp_path / "b33", [cell()])
    write_shard(tmp_path / "b34", [cell()], env=newer)
    assert main(["merge", str(tmp_path / "a33"), str(tmp_path / "a34"), "--out", str(tmp_path / "base")]) == 0
    assert main(["merge", str(tmp_path / "b33"), str(tmp_path / "b34"), "--out", str(tmp_path / "cur")]) == 0
    diff = diff_reports(load_report(tmp_path / "base"), load_report(tmp_path / "cur"))
    assert [(c.kind, c.run.split(" / ")[3]) for c in diff.changes] == [(Change.BETTER, "vllm 0.34.0")]
    assert all(pair.baseline and pair.current and pair.baseline.key == pair.current.key for pair in diff.pairs)


def test_markdown_goes_to_stdout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = write_shard(tmp_path / "old", [cell()])
    assert main(["diff", str(old), str(old)]) == 0
    assert capsys.readouterr().out.startswith("# DFlash matrix diff")


def _exact(tmp_path: Path, before: list, after: list) -> tuple[int, dict]:
    old = write_shard(tmp_path / "old", before)
    new = write_shard(tmp_path / "new", after)
    out = tmp_path / "exact.json"
    status = main(["diff", "--exact", str(old), str(new), "--json", str(out)])
    return status, json.loads(out.read_text())


def _timed(result: CellResult, duration: float, **details: object) -> CellResult:
    return dataclasses.replace(result, duration_s=duration, details=details)


def test_exact_ignores_durations_and_timings_only(tmp_path: Path) -> None:
    before = [_timed(cell(), 0.5, timings_s={"config": 0.1}, draft="d1"), cell("B", verdict="unsupported")]
    after = [_timed(cell(), 9.0, timings_s={"config": 3.0}, draft="d1"), cell("B", verdict="unsupported")]
    status, data = _exact(tmp_path, before, after)
    assert status == 0 and data["compared"] == 2 and data["identical"] == 2 and data["differences"] == []


def test_exact_names_every_field_that_moved_and_exits_1(tmp_path: Path) -> None:
    before = [_timed(cell(message="A: 0.01"), 0.5, draft="d1"), cell("B")]
    # Same verdict and outcome: the ordinary diff sees nothing, the exact one sees both fields.
    after = [_timed(cell(message="A: 0.02"), 0.5, draft="d2"), cell("B")]
    assert main(["diff", str(write_shard(tmp_path / "o", before)), str(write_shard(tmp_path / "n", after))]) == 0
    status, data = _exact(tmp_path, before, after)
    assert status == 1 and data["identical"] == 1
    (moved,) = data["differences"]
    assert moved["id"] == cell().id
    assert {f["field"]: (f["before"], f["after"]) for f in moved["fields"]} == {
        "details.draft": ("d1", "d2"),
        "message": ("A: 0.01", "A: 0.02"),
    }


def test_exact_lists_cells_on_one_side_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    status, data = _exact(tmp_path, [cell("A"), cell("B")], [cell("A"), cell("C")])
    assert status == 1 and data["compared"] == 1 and data["identical"] == 1
    assert {(d["id"], d["only_in"]) for d in data["differences"]} == {
        (cell("B").id, "baseline"),
        (cell("C").id, "current"),
    }
    assert "1 cells in both, 1 identical, 0 differ; 2 on one side only" in capsys.readouterr().out


def test_no_baseline_yet_is_said_and_not_a_failure_only_when_allowed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """tox -e gpu-emulated diffs against reports/gpu-emulated/baseline/ only where one was put, as
    gpu-matrix.yml's report job diffs only once a baseline was published."""
    new = write_shard(tmp_path / "new", [cell()])
    missing = tmp_path / "baseline"
    assert main(["diff", str(missing), str(new), "--missing-baseline-ok"]) == 0
    assert capsys.readouterr().out == f"No baseline at {missing}: nothing to diff against.\n"
    assert main(["diff", str(missing), str(new)]) == 2
    assert "no such file or directory" in capsys.readouterr().err
