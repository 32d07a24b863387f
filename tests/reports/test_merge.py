"""merge: many shards, devices and versions into one report, never overwriting, never hiding conflicts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import xmlschema
from junitparser import JUnitXml

from harness.cli import main
from harness.reports.build import render_reports
from harness.reports.inputs import load_inputs, read_matrix_json
from harness.reports.junit import render_junit
from harness.reports.matrix_json import matrix_document
from harness.reports.merge import merge
from harness.reports.step_summary import SUMMARY_LIMIT_BYTES, TRUNCATED_NOTE, append_step_summary, fit_summary

from .shards import DEFAULT_ENV, cell, write_journal, write_shard

pytestmark = pytest.mark.pure

XSD = Path(__file__).parents[1] / "core" / "schemas" / "junit-10.xsd"
B200 = {**DEFAULT_ENV, "device": "NVIDIA B200"}
VLLM_034 = {**DEFAULT_ENV, "vllm_version": "0.34.0"}


def _merged(*inputs: Path) -> tuple[dict, JUnitXml]:
    report = merge(load_inputs(inputs))
    return matrix_document(report), JUnitXml.fromstring(render_junit(report))


def test_the_same_cell_on_two_devices_and_two_versions_stays_three_rows(tmp_path: Path) -> None:
    h100 = write_shard(tmp_path / "h100", [cell(sink=True)])
    b200 = write_shard(tmp_path / "b200", [cell(sink=True, verdict="unsupported", expected="pass")], env=B200)
    newer = write_shard(tmp_path / "v034", [cell(sink=True, verdict="crash", expected="pass")], env=VLLM_034)
    data, junit = _merged(h100, b200, newer)
    assert len(data["runs"]) == 3
    assert sorted((c["run"].split(" / ")[2], c["run"].split(" / ")[3], c["verdict"]) for c in data["cells"]) == [
        ("NVIDIA B200", "vllm 0.33.0", "unsupported"),
        ("NVIDIA H100", "vllm 0.33.0", "pass"),
        ("NVIDIA H100", "vllm 0.34.0", "crash"),
    ]
    assert data["conflicts"] == []
    assert junit.tests == 3 and len(list(junit)) == 3


def test_journal_matrix_json_and_junit_of_one_run_collapse_to_one_copy(tmp_path: Path) -> None:
    shard = write_shard(tmp_path / "a", [cell(), cell(sink=True, verdict="unsupported")])
    # The directory holds the journal, matrix.json and junit.xml; a re-upload doubles them all.
    data, junit = _merged(shard, shard / "matrix.json", shard / "junit.xml")
    assert data["summary"]["cells"] == 2
    assert data["summary"]["conflicts"] == 0
    assert junit.tests == 2


def test_xdist_workers_of_one_run_merge_into_one_run(tmp_path: Path) -> None:
    first, second = cell(), cell("TRITON_ATTN")
    planned = [first.id, second.id, "FLEX_ATTENTION-causal-nosink"]
    write_journal(tmp_path / "gw0.jsonl", [first], planned=planned)
    write_journal(tmp_path / "gw1.jsonl", [second], planned=planned)
    data, _ = _merged(tmp_path / "gw0.jsonl", tmp_path / "gw1.jsonl")
    assert len(data["runs"]) == 1
    assert len(data["cells"]) == 2
    # Each worker planned all three; only the one nobody ran is reported as not run.
    assert [item["id"] for item in data["not_run"]] == ["FLEX_ATTENTION-causal-nosink"]


def test_conflicting_duplicates_keep_the_worse_verdict_and_are_listed(tmp_path: Path) -> None:
    write_shard(tmp_path / "try1", [cell("TRITON_ATTN")])
    write_shard(tmp_path / "try2", [cell("TRITON_ATTN", verdict="crash", expected="pass", message="boom")])
    try1, try2 = tmp_path / "try1" / "matrix.json", tmp_path / "try2" / "matrix.json"
    data, _ = _merged(try1, try2)
    (kept,) = data["cells"]
    assert kept["verdict"] == "crash" and kept["conflict"]["kept"] == "crash"
    (conflict,) = data["conflicts"]
    assert conflict["verdicts"] == ["pass", "crash"] and conflict["kept"] == "crash"
    assert data["summary"]["ok"] is False
    # The dashboards see the conflict in the testcase itself, under the verdict line.
    (case,) = list(next(iter(JUnitXml.fromstring(render_junit(merge(load_inputs([try1, try2])))))))
    assert case.is_error
    assert (case.system_out or "").splitlines()[1] == (
        f"conflict: inputs disagree: pass ({try1}), crash ({try2}); the worse, crash, is kept"
    )


def test_conflicting_junit_testcases_keep_the_worse_status(tmp_path: Path) -> None:
    write_shard(tmp_path / "try1", [cell("TRITON_ATTN")])
    write_shard(tmp_path / "try2", [cell("TRITON_ATTN", verdict="crash", expected="pass")])
    data, junit = _merged(tmp_path / "try1" / "junit.xml", tmp_path / "try2" / "junit.xml")
    (suite,) = list(junit)
    (case,) = list(suite)
    assert case.is_error
    (conflict,) = data["conflicts"]
    assert conflict["junit_statuses"] == ["passed", "error"] and conflict["kept"] == "error"
    # JUnit alone cannot place cells in the grid; the run is named, not silently dropped.
    assert data["summary"]["junit_only_runs"] == [data["runs"][0]["key"]]
    report = merge(load_inputs([tmp_path / "try1" / "junit.xml"]))
    assert "| JUnit only: 1 testcases |" in render_reports(report)["matrix.md"].decode()


def test_a_junit_testcase_not_run_in_one_shard_gives_way_to_the_shard_that_ran_it(tmp_path: Path) -> None:
    ran, other = cell("TRITON_ATTN"), cell("FLEX_ATTENTION")
    write_shard(tmp_path / "first", [other], planned=[other.id, ran.id])  # never reached TRITON_ATTN
    write_shard(tmp_path / "second", [ran], planned=[ran.id])
    data, junit = _merged(tmp_path / "first" / "junit.xml", tmp_path / "second" / "junit.xml")
    (suite,) = list(junit)
    cases = {case.name: case for case in suite}
    assert cases[other.id].is_passed and cases[ran.id].is_passed
    # The first shard's own verdict on itself stands: from JUnit alone nothing proves its run complete.
    assert cases["run::incomplete"].is_error
    assert suite.skipped == 0 and data["conflicts"] == []


def test_merged_junit_validates_and_keeps_environment_properties(tmp_path: Path) -> None:
    h100 = write_shard(tmp_path / "h100", [cell(), cell("TRITON_ATTN", verdict="mismatch", expected="pass")])
    b200 = tmp_path / "b200.jsonl"
    write_journal(b200, [cell()], env=B200)  # no junit.xml: its suite is built from the journal
    report = merge(load_inputs([h100 / "junit.xml", b200]))
    xml = render_reports(report)["junit.xml"]
    xmlschema.XMLSchema(str(XSD)).validate(xml.decode())
    junit = JUnitXml.fromstring(xml)
    devices = {dict((p.name, p.value) for p in suite.properties())["device"] for suite in junit}
    assert devices == {"NVIDIA H100", "NVIDIA B200"}
    assert junit.tests == 3 and junit.errors == 1  # a mismatch regression is an <error>: red on EnricoMi


def test_merged_report_reads_back_and_merges_again_unchanged(tmp_path: Path) -> None:
    a = write_shard(tmp_path / "a", [cell(), cell(sink=True, verdict="unsupported", claim=True)])
    b = write_shard(tmp_path / "b", [cell()], env=B200)
    assert main(["merge", str(a), str(b), "--out", str(tmp_path / "m1")]) == 0
    assert main(["merge", str(tmp_path / "m1" / "matrix.json"), "--out", str(tmp_path / "m2")]) == 0
    first = json.loads((tmp_path / "m1" / "matrix.json").read_text())
    second = json.loads((tmp_path / "m2" / "matrix.json").read_text())
    assert first["cells"] == second["cells"] and first["summary"] == second["summary"]
    assert len(read_matrix_json(tmp_path / "m1" / "matrix.json")) == 2
    assert first["summary"]["over_claims"] == 1
    written = sorted(p.name for p in (tmp_path / "m1").iterdir())
    assert written == ["junit.xml", "matrix.html", "matrix.json", "matrix.md"]


def test_markdown_grid_has_device_columns_and_escapes_test_output(tmp_path: Path) -> None:
    hostile = "<img src=x onerror=alert(1)> | broken *table*"
    h100 = write_shard(tmp_path / "h100", [cell(sink=True, verdict="crash", expected="pass", message=hostile)])
    b200 = write_shard(tmp_path / "b200", [cell(sink=True)], env=B200)
    report = merge(load_inputs([h100, b200]))
    markdown = render_reports(report)["matrix.md"].decode()
    header = next(line for line in markdown.splitlines() if line.startswith("| backend | causal"))
    assert "NVIDIA B200 · vLLM 0.33.0" in header and "NVIDIA H100 · vLLM 0.33.0" in header
    row = next(line for line in markdown.splitlines() if line.startswith("| FLASH\\_ATTN | causal | sink"))
    assert row.count(" | ") == header.count(" | ")  # the message's '|' did not add a column
    # GitHub Markdown reads a backslash-escaped character as itself: no tag, no table cell, no emphasis.
    assert not re.search(r"(?<!\\)<img", markdown)
    assert "\\<img src=x onerror=alert(1)\\> \\| broken \\*table\\*" in markdown


def test_step_summary_is_appended_only_under_actions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shard = write_shard(tmp_path / "a", [cell()])
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert main(["merge", str(shard), "--out", str(tmp_path / "out")]) == 0
    text = summary.read_text()
    assert text.startswith("earlier step\n") and "| backend | causal | sink | window |" in text
    assert append_step_summary("x", environ={}) is None


def test_an_oversized_summary_is_cut_at_a_line_with_a_note() -> None:
    text = "".join(f"| row {i} | {'x' * 80} |\n" for i in range(20000))
    cut = fit_summary(text)
    assert len(cut.encode()) <= SUMMARY_LIMIT_BYTES
    assert cut.endswith(TRUNCATED_NOTE) and cut[: -len(TRUNCATED_NOTE)].endswith("|\n")
    assert fit_summary("small\n") == "small\n"


def test_a_capability_axis_becomes_columns_and_lanes_get_their_own_grid(tmp_path: Path) -> None:
    selection = {**DEFAULT_ENV, "platform": "cuda (simulated)", "device": "simulated"}
    simulated = write_shard(
        tmp_path / "sel",
        [
            cell(sink=True, capability="8.0", verdict="unsupported", lane="selection"),
            cell(sink=True, capability="9.0", lane="selection"),
        ],
        lane="selection",
        env=selection,
    )
    real = write_shard(tmp_path / "gpu", [cell(sink=True)])
    report = merge(load_inputs([simulated, real]))
    markdown = render_reports(report)["matrix.md"].decode()
    assert "## Lane gpu" in markdown and "## Lane selection" in markdown
    header = next(line for line in markdown.splitlines() if "sm 8.0" in line)
    assert "simulated · vLLM 0.33.0 · sm 8.0" in header and "simulated · vLLM 0.33.0 · sm 9.0" in header
    row = markdown.splitlines()[markdown.splitlines().index(header) + 2]
    assert row.startswith("| FLASH\\_ATTN | causal | sink |") and "⛔ unsupported" in row and "✅ pass" in row
