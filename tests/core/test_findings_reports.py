"""The findings a run shows, in every report: matrix.md and matrix.html list each (title, kind, upstream,
cells, status, anchored cell list), junit.xml has a finding:ID property per finding and names the finding
in each of its cells' system-out, matrix.json carries them; a finding whose cells all get what they would
without it is "fixed in X?" and its rules stale, as a rule deciding no cell is. All rebuilt from the
journal, and again from matrix.json, without the expectation files."""

from __future__ import annotations

from pathlib import Path

import pytest
import xmlschema
from junitparser import JUnitXml

from harness.expectations import expectations_for
from harness.journal import read_journals
from harness.matrix import expand
from harness.reports import write_reports
from harness.reports.inputs import Inputs, read_matrix_json
from harness.reports.merge import merge, report_from_journal
from harness.result import decide
from harness.verdict import Verdict

from .samples import OBSERVATIONS, RULES, matrix_from, write_journal

pytestmark = pytest.mark.pure

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "schemas" / "junit-10.xsd")
FINDING = "bf16-noncausal-drift"  # RULES' mismatch rule: CPU_ATTN, non-causal (two cells)


def _journal(tmp_path: Path, fixed: int) -> Path:
    """A run of RULES' matrix in which ``fixed`` of the finding's two cells pass (what they get without it)."""
    matrix = matrix_from(tmp_path, expectations=RULES)
    expectations = expectations_for(matrix)
    results = []
    for cell in expand(matrix):
        expectation = expectations.for_cell(cell)
        verdict = expectation.verdict
        if expectation.finding is not None and fixed:
            verdict, fixed = Verdict.PASS, fixed - 1
        results.append(decide(cell, OBSERVATIONS[verdict], expectation))
    return write_journal(tmp_path / "journal" / "main.jsonl", results, [cell.id for cell in expand(matrix)])


def test_a_present_finding_is_listed_with_its_cells_in_every_report(tmp_path: Path) -> None:
    written = write_reports(read_journals([_journal(tmp_path, fixed=0)]), tmp_path / "out")
    markdown = written["matrix.md"].read_text()
    assert "## Findings (1)" in markdown
    assert (
        "| [CPU\\_ATTN drifts on bf16 non-causal drafts](#bf16-noncausal-drift) | upstream-bug | unreported | 0.24.0 "
        "| x86\\_64 · vLLM 0.32.0 | 2 | present in vLLM 0.32.0 |" in markdown
    )
    assert "### bf16-noncausal-drift" in markdown and "- CPU\\_ATTN-noncausal-sink-bf16" in markdown
    html = written["matrix.html"].read_text()
    assert '<tr id="bf16-noncausal-drift">' in html and "present in vLLM 0.32.0" in html
    SCHEMA.validate(written["junit.xml"])
    (suite,) = list(JUnitXml.fromfile(str(written["junit.xml"])))
    props = {prop.name: prop.value for prop in suite.properties()}
    assert props[f"finding:{FINDING}"] == (
        "CPU_ATTN drifts on bf16 non-causal drafts · upstream-bug · upstream: unreported · 2 cells · "
        "present in vLLM 0.32.0"
    )
    out = {case.name: case.system_out for case in suite}
    assert (
        f"finding {FINDING} (upstream-bug, upstream: unreported, since vLLM 0.24.0)"
        in out["CPU_ATTN-noncausal-sink-bf16"]
    )
    assert "without it: pass" in out["CPU_ATTN-noncausal-sink-bf16"]
    assert "finding" not in out["CPU_ATTN-causal-sink-bf16"]
    report = report_from_journal(read_journals([tmp_path / "journal" / "main.jsonl"]))
    assert report.summary()["ok"] and report.summary()["findings"] == 1


def test_a_finding_whose_cells_all_behave_as_without_it_is_fixed_and_its_rules_stale(tmp_path: Path) -> None:
    report = report_from_journal(read_journals([_journal(tmp_path, fixed=2)]))
    (item,) = report.findings
    assert item.status == "fixed in 0.32.0?" and item.fixed == item.cells
    assert item.stale in report.stale_expectations
    summary = report.summary()
    assert (summary["findings_fixed"], summary["ok"]) == (1, False)
    written = write_reports(read_journals([tmp_path / "journal" / "main.jsonl"]), tmp_path / "out")
    assert f"finding {FINDING}: fixed in 0.32.0? its 2 cells get what they would without it" in (
        written["matrix.md"].read_text()
    )
    (suite,) = list(JUnitXml.fromfile(str(written["junit.xml"])))
    stale = next(case for case in suite if case.name == "expectations::stale")
    assert f"finding {FINDING}: fixed in 0.32.0?" in stale.result[0].message
    # Read back from matrix.json (another machine, no expectation files): the same findings, not doubled.
    again = merge(Inputs(tuple(read_matrix_json(written["matrix.json"])), ()))
    assert [(i.finding.id, i.status, i.cells) for i in again.findings] == [(FINDING, item.status, item.cells)]
    assert again.stale_expectations == report.stale_expectations


def test_half_fixed_is_said_and_the_rules_are_not_stale(tmp_path: Path) -> None:
    report = report_from_journal(read_journals([_journal(tmp_path, fixed=1)]))
    (item,) = report.findings
    assert item.status == "fixed in 0.32.0? (1 of 2 cells)" and item.stale is None
    assert report.stale_expectations == ()


def test_a_planted_new_bug_is_listed_as_an_unrecorded_fault(tmp_path: Path) -> None:
    """A loader change that makes cells wrong-backend, run against expectations without a finding for it."""
    matrix = matrix_from(tmp_path, expectations=RULES)
    expectations = expectations_for(matrix)
    results = []
    for cell in expand(matrix):
        planted = cell.get("backend") == "CPU_ATTN" and cell.get("causal")
        verdict = Verdict.WRONG_BACKEND if planted else expectations.for_cell(cell).verdict
        results.append(decide(cell, OBSERVATIONS[verdict], expectations.for_cell(cell)))
    journal = write_journal(tmp_path / "journal" / "main.jsonl", results, [cell.id for cell in expand(matrix)])
    report = report_from_journal(read_journals([journal]))
    assert report.summary()["unrecorded_faults"] == 2 and not report.summary()["ok"]
    markdown = write_reports(read_journals([journal]), tmp_path / "out")["matrix.md"].read_text()
    assert "2 of them are unrecorded faults: no finding records them" in markdown
    assert "| CPU\\_ATTN-causal-sink-bf16 | wrong-backend | pass | build | unrecorded |" in markdown
