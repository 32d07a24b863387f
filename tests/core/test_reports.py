"""Journal -> junit.xml, matrix.json, matrix.md: contents, schema validity, escaping, atomicity."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from junitparser import Error, Failure, JUnitXml, Skipped

from harness.errors import InputError
from harness.journal import read_journals
from harness.matrix import Cell, expand
from harness.observation import Claim
from harness.reports import write_reports
from harness.reports.inputs import read_matrix_json
from harness.reports.matrix_json import matrix_document
from harness.reports.merge import report_from_journal
from harness.reports.text import md
from harness.result import CellResult
from harness.verdict import Verdict

from .samples import BASIC_MATRIX, CONTRACT_KEYS, matrix_from, result, write_journal

pytestmark = pytest.mark.pure

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "schemas" / "junit-10.xsd")
REPORTS = ("junit.xml", "matrix.json", "matrix.md", "matrix.html")
STALE = ["expect.toml: expect[2] (old rule | with a pipe) matches no cell that it decides"]


def _cells(tmp_path: Path, text: str = BASIC_MATRIX) -> dict[str, Cell]:
    return {cell.id: cell for cell in expand(matrix_from(tmp_path, text))}


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    """A run killed after six of eight cells: one of each interesting kind."""
    cells = _cells(tmp_path)
    results = [
        result(cells["CPU_ATTN-causal-sink-bf16"], Verdict.PASS, claim=Claim(False, ("sinks: no",))),
        result(cells["CPU_ATTN-causal-nosink-bf16"], Verdict.PASS),
        result(cells["CPU_ATTN-noncausal-sink-bf16"], Verdict.MISMATCH, Verdict.PASS, claim=Claim(True)),
        result(cells["CPU_ATTN-noncausal-nosink-bf16"], Verdict.CRASH, Verdict.PASS),
        result(cells["FLASH_ATTN-causal-sink-bf16"], Verdict.PASS, Verdict.UNSUPPORTED),
        result(cells["FLASH_ATTN-causal-nosink-bf16"], Verdict.SUBSTITUTED),
    ]
    return write_journal(
        tmp_path / "journal" / "main.jsonl", results, list(cells), run={"stale_expectations": STALE}, end=False
    )


def _reports(journal: Path, out: Path) -> dict[str, Path]:
    return write_reports(read_journals([journal]), out)


def test_writes_three_reports(journal: Path, tmp_path: Path) -> None:
    written = _reports(journal, tmp_path / "out")
    assert sorted(written) == sorted(REPORTS)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(REPORTS)  # no temp files left
    assert all(oct(path.stat().st_mode)[-3:] == "644" for path in written.values())


def test_junit_validates_against_the_junit_10_schema(journal: Path, tmp_path: Path) -> None:
    SCHEMA.validate(_reports(journal, tmp_path / "out")["junit.xml"])


def test_junit_cases(journal: Path, tmp_path: Path) -> None:
    xml = JUnitXml.fromfile(str(_reports(journal, tmp_path / "out")["junit.xml"]))
    (suite,) = list(xml)
    assert suite.name == "dflash-matrix.cpu [x86_64 · vLLM 0.32.0]"
    props = {p.name: p.value for p in suite.properties()}
    assert props["lane"] == "cpu" and props["vllm_version"] == "0.32.0" and props["torch_version"] == "2.13"
    assert props["matrix"] == "basic" and "started_at" in props and "ended_at" not in props
    assert suite.timestamp == props["started_at"]
    cases = {case.name: case for case in suite}
    group = "cpu [x86_64 · vLLM 0.32.0]"  # the run is in the classname too: EnricoMi keys tests by it
    assert cases["CPU_ATTN-causal-sink-bf16"].classname == f"{group}.CPU_ATTN"
    assert cases["CPU_ATTN-causal-sink-bf16"].time == 0.25
    assert cases["CPU_ATTN-causal-sink-bf16"].is_passed
    substituted = cases["FLASH_ATTN-causal-nosink-bf16"]
    assert substituted.is_passed
    assert (substituted.system_out or "").splitlines()[0] == (
        "substituted as expected (rule 0: expected substituted) · requested FLASH_ATTN · draft layers CPU_ATTN"
        " · requested FLASH_ATTN, ran CPU_ATTN"
    )

    # Regressions are <error>: EnricoMi annotates <failure> as a warning, <error> as a failure.
    (mismatch,) = cases["CPU_ATTN-noncausal-sink-bf16"].result
    assert isinstance(mismatch, Error) and mismatch.type == "regression"
    assert mismatch.message == "expected pass, observed mismatch: max abs error 0.5 > tolerance 0.02 on FLASH_ATTN"
    (crash,) = cases["CPU_ATTN-noncausal-nosink-bf16"].result
    assert isinstance(crash, Error) and crash.type == "regression"
    assert crash.message is not None and "observed crash: RuntimeError: illegal memory access" in crash.message
    assert crash.text is not None and "verdict: crash (stage forward)" in crash.text
    (unexpected,) = cases["FLASH_ATTN-causal-sink-bf16"].result
    assert isinstance(unexpected, Failure) and unexpected.type == "unexpected-pass"

    for ident in ("FLASH_ATTN-noncausal-sink-bf16", "FLASH_ATTN-noncausal-nosink-bf16"):
        (skipped,) = cases[ident].result
        assert isinstance(skipped, Skipped) and skipped.message is not None
        assert skipped.message.startswith("not run: the run stopped before it")
        assert cases[ident].classname == f"{group}.FLASH_ATTN"
    (incomplete,) = cases["run::incomplete"].result
    assert isinstance(incomplete, Error) and incomplete.type == "incomplete-run"
    assert incomplete.message == "the run was killed or timed out before its end: 2 of 8 planned cells not run"

    stale = cases["expectations::stale"]
    assert stale.classname == f"{group}.expectations"
    assert isinstance(stale.result[0], Failure) and stale.result[0].type == "stale-expectations"
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (10, 2, 3, 2)


def test_expected_crash_is_a_pass_and_wrong_message_a_failure(tmp_path: Path) -> None:
    cells = list(_cells(tmp_path).values())
    results = [result(cells[0], Verdict.CRASH), result(cells[1], Verdict.SUBSTITUTED, message="TRITON")]
    path = write_journal(tmp_path / "main.jsonl", results, [c.id for c in cells[:2]])
    suite = next(iter(JUnitXml.fromfile(str(_reports(path, tmp_path / "out")["junit.xml"]))))
    crash, substituted = list(suite)
    assert crash.is_passed
    (failure,) = substituted.result
    assert isinstance(failure, Failure) and failure.type == "changed"
    assert failure.message == (
        "expected substituted with a message containing 'TRITON', "
        "observed substituted: requested FLASH_ATTN, ran CPU_ATTN"
    )


def test_matrix_json_contract(journal: Path, tmp_path: Path) -> None:
    data = json.loads(_reports(journal, tmp_path / "out")["matrix.json"].read_text())
    assert data["schema"] == "dflash-matrix/2"
    (run,) = data["runs"]
    assert run["lane"] == "cpu"
    for key in ("platform", "device", "vllm_version", "torch_version", "started_at", "ended_at"):
        assert key in run
    assert run["ended_at"] is None and run["finished"] is False and run["incomplete"] is True  # killed
    assert (run["vllm_version"], run["device"]) == ("0.32.0", "x86_64")
    assert run["suite"] == "dflash-matrix.cpu [x86_64 · vLLM 0.32.0]" and run["label"] == "x86_64 · vLLM 0.32.0"
    assert run["stale_expectations"] == STALE
    contract = CONTRACT_KEYS | {"outcome", "claim_gap", "run", "conflict"}
    assert all(contract <= cell.keys() for cell in data["cells"])
    assert {cell["run"] for cell in data["cells"]} == {run["key"]}
    assert [c["id"] for c in data["cells"]][:2] == ["CPU_ATTN-causal-sink-bf16", "CPU_ATTN-causal-nosink-bf16"]
    assert data["not_run"] == [
        {"run": run["key"], "id": "FLASH_ATTN-noncausal-sink-bf16"},
        {"run": run["key"], "id": "FLASH_ATTN-noncausal-nosink-bf16"},
    ]
    summary = data["summary"]
    assert (summary["cells"], summary["not_run"], summary["match"], summary["mismatching"]) == (6, 2, 3, 3)
    assert summary["verdicts"]["pass"] == 3 and summary["verdicts"]["timeout"] == 0
    assert summary["outcomes"] == {"match": 3, "unexpected-pass": 1, "regression": 2, "changed": 0}
    assert summary["ok"] is False and summary["incomplete_runs"] == 1
    assert [c["id"] for c in data["claims"]["over_claims"]] == ["CPU_ATTN-noncausal-sink-bf16"]
    assert data["claims"]["under_claims"] == [
        {
            "run": run["key"],
            "id": "CPU_ATTN-causal-sink-bf16",
            "verdict": "pass",
            "supported": False,
            "reasons": ["sinks: no"],
            "message": "FLASH_ATTN: max abs error 0.001 <= 0.02",
        }
    ]
    assert data["stale_expectations"] == STALE
    for record in data["cells"]:
        assert CellResult.from_json(record).id == record["id"]


def test_a_dflash_matrix_1_report_of_one_run_still_reads(journal: Path, tmp_path: Path) -> None:
    data = json.loads(_reports(journal, tmp_path / "out")["matrix.json"].read_text())
    (run,) = data["runs"]
    old = {
        "schema": "dflash-matrix/1",
        "run": {key: value for key, value in run.items() if key not in ("key", "label", "suite", "finished")},
        "cells": [{k: v for k, v in cell.items() if k not in ("run", "conflict")} for cell in data["cells"]],
        "not_run": [item["id"] for item in data["not_run"]],
        "stale_expectations": STALE,
    }
    (tmp_path / "old.json").write_text(json.dumps(old))
    (part,) = read_matrix_json(tmp_path / "old.json")
    assert part.run.key == run["key"] and part.finished is False
    assert len(part.cells) == 6 and part.not_run == tuple(item["id"] for item in data["not_run"])
    assert part.stale_expectations == tuple(STALE)


def test_matrix_json_is_strict_json_even_with_nan_details(tmp_path: Path) -> None:
    cells = list(_cells(tmp_path).values())
    record = result(cells[0], Verdict.PASS).to_json()
    record["details"] = {"warmup_err": float("inf"), "nested": [float("nan")]}
    path = write_journal(tmp_path / "main.jsonl", [CellResult.from_json(record)], [cells[0].id])
    text = _reports(path, tmp_path / "out")["matrix.json"].read_text()

    def refuse(constant: str) -> Any:
        raise AssertionError(f"{constant} in matrix.json")

    data = json.loads(text, parse_constant=refuse)
    assert data["cells"][0]["details"] == {"warmup_err": "inf", "nested": ["nan"]}
    assert data["summary"]["ok"] is True and data["runs"][0]["ended_at"] is not None


def test_markdown_grid(journal: Path, tmp_path: Path) -> None:
    text = _reports(journal, tmp_path / "out")["matrix.md"].read_text()
    lines = text.splitlines()
    assert "| backend | causal | sink | window | x86\\_64 · vLLM 0.32.0 |" in lines
    assert "| cpu | x86\\_64 | cpu | 0.32.0 | 2.13 |" in text and "| killed or timed out | 6 |" in text

    def row(backend: str, causal: str, sink: str) -> str:
        return next(line for line in lines if line.startswith(f"| {backend} | {causal} | {sink} |"))

    assert row("CPU\\_ATTN", "causal", "no sink").endswith("| ✅ pass |")
    assert "❌ mismatch ❗1 ◆1" in row("CPU\\_ATTN", "non-causal", "sink")
    assert "💥 crash ❗1" in row("CPU\\_ATTN", "non-causal", "no sink")
    assert "✅ pass ❗1" in row("FLASH\\_ATTN", "causal", "sink")
    assert "**1 run(s) did not complete**" in text
    assert "## Not as expected (3)" in text and "## Claims vs observed (2)" in text
    assert "## Planned but not run (2)" in text and "FLASH\\_ATTN-noncausal-sink-bf16" in text
    assert "## Stale expectations" in text and "(old rule \\| with a pipe)" in text


def test_markdown_counts_cells_that_other_axes_split(tmp_path: Path) -> None:
    text = BASIC_MATRIX.replace('dtype = ["bfloat16"]', 'dtype = ["bfloat16", "float16", "float32"]')
    text = text.replace('backend = ["CPU_ATTN", "FLASH_ATTN"]', 'backend = ["CPU_ATTN"]')
    text = text.replace("[axes]\n", '[axes]\ncapability = ["8.0", "9.0"]\n').replace('lane = "cpu"', 'lane = "gpu"')
    cells = _cells(tmp_path, text)
    results = [
        result(
            cell,
            Verdict.MISMATCH if cell.get("dtype") == "float32" and cell.get("capability") == "9.0" else Verdict.PASS,
        )
        for cell in cells.values()
    ]
    path = write_journal(tmp_path / "main.jsonl", results, list(cells), lane="gpu")
    md_text = _reports(path, tmp_path / "out")["matrix.md"].read_text()
    # The compute capability is a column (the GPU generation), dtype is counted inside an entry.
    columns = "| x86\\_64 · vLLM 0.32.0 · sm 8.0 | x86\\_64 · vLLM 0.32.0 · sm 9.0 |"
    assert "| backend | causal | sink | window " + columns in md_text
    assert "| CPU\\_ATTN | causal | sink | — | ✅ pass x3 | ❌ mismatch 1 · pass 2 [" in md_text
    assert "Not as expected" not in md_text and "did not complete" not in md_text


def test_markdown_escapes_markup_and_keeps_tables_intact(tmp_path: Path) -> None:
    assert md("a|b *c* <img src=x> [l](u) `x` \x1b[31m\nnext") == (
        "a\\|b \\*c\\* \\<img src=x\\> \\[l\\](u) \\`x\\` \\[31m next"
    )
    assert md("x" * 100, limit=10) == "x" * 9 + "\u2026"


def test_hostile_message_text_stays_valid_xml_and_markdown(tmp_path: Path) -> None:
    cells = list(_cells(tmp_path).values())
    record = result(cells[0], Verdict.CRASH, Verdict.PASS).to_json()
    record["message"] = 'boom\x00\x1b[0m | <b>]]></b> & \ud800 "quoted"\n| new | row |'
    path = write_journal(tmp_path / "main.jsonl", [CellResult.from_json(record)], [cells[0].id])
    written = _reports(path, tmp_path / "out")
    SCHEMA.validate(written["junit.xml"])
    (case,) = list(next(iter(JUnitXml.fromfile(str(written["junit.xml"])))))
    assert case.result[0].message is not None and "<b>]]></b> & " in case.result[0].message
    table_rows = [line for line in written["matrix.md"].read_text().splitlines() if line.startswith("| cpu / ")]
    assert len(table_rows) == 1 and table_rows[0].count(" | ") == 6  # run, cell, verdict, expected, stage, finding


def test_bad_journal_leaves_existing_reports_untouched(journal: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    good = {name: path.read_bytes() for name, path in _reports(journal, out).items()}
    with journal.open("a") as handle:
        handle.write('{"kind": "cell", "cell": {"verdict": "fine"}}\n{"kind": "end"}\n')
    with pytest.raises(InputError):
        _reports(journal, out)
    assert {name: (out / name).read_bytes() for name in REPORTS} == good


def test_bad_journal_creates_no_output_directory(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "run", "run": {"lane": "cpu"}, "planned": []}\nnot json\n')
    with pytest.raises(InputError):
        _reports(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_write_that_fails_midway_keeps_the_old_file(
    journal: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    old = _reports(journal, out)["junit.xml"].read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(InputError, match="cannot write reports: No space left on device"):
        _reports(journal, out)
    assert (out / "junit.xml").read_bytes() == old
    assert sorted(p.name for p in out.iterdir()) == sorted(REPORTS)


def test_output_path_that_is_a_file(journal: Path, tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("x")
    with pytest.raises(InputError, match="not a directory"):
        _reports(journal, tmp_path / "taken")


def test_journals_of_two_lanes_are_refused(tmp_path: Path) -> None:
    cell = next(iter(_cells(tmp_path).values()))
    cpu = result(cell, Verdict.PASS)
    write_journal(tmp_path / "j" / "cpu.jsonl", [cpu], [cell.id])
    write_journal(
        tmp_path / "j" / "fake.jsonl", [CellResult.from_json({**cpu.to_json(), "lane": "fake"})], [], lane="fake"
    )
    with pytest.raises(InputError, match=r"several lanes \(cpu, fake\)"):
        matrix_document(report_from_journal(read_journals([tmp_path / "j"])))


def test_the_loader_differential_shows_in_every_report(tmp_path: Path) -> None:
    """A loader-diff cell, a bitwise-agreeing cell and a not-comparable one: junit, matrix.json,
    matrix.md and matrix.html each say what was compared and what V1 refused."""
    import dataclasses

    from harness.expectations import Expectation
    from harness.observation import LayerAgreement, LoaderDifferential
    from harness.result import decide

    from .samples import OBSERVATIONS

    cells = _cells(tmp_path)
    agree = LoaderDifferential((LayerAgreement("layers.0", "CPUImpl", "CPUImpl", True, 0.0),))
    refused = LoaderDifferential(not_comparable="Model Runner V1 does not support: dspark speculative decoding")

    def judged(ident: str, observation: Any, expected: Verdict) -> CellResult:
        return decide(cells[ident], observation, Expectation(expected, f"expected {expected.value}", rule=0))

    passing = OBSERVATIONS[Verdict.PASS]
    results = [
        judged("CPU_ATTN-causal-sink-bf16", OBSERVATIONS[Verdict.LOADER_DIFF], Verdict.PASS),
        judged("CPU_ATTN-causal-nosink-bf16", dataclasses.replace(passing, loader_differential=agree), Verdict.PASS),
        judged("CPU_ATTN-noncausal-sink-bf16", dataclasses.replace(passing, loader_differential=refused), Verdict.PASS),
    ]
    assert [r.verdict for r in results] == [Verdict.LOADER_DIFF, Verdict.PASS, Verdict.PASS]
    journal = write_journal(tmp_path / "journal" / "main.jsonl", results, [r.id for r in results])
    written = _reports(journal, tmp_path / "out")

    summary = json.loads(written["matrix.json"].read_text())["summary"]
    assert summary["verdicts"]["loader-diff"] == 1
    assert summary["loader_differential"] == {
        "compared": 2,
        "bitwise": 1,
        "disagreeing": 1,
        "max_abs_diff": 4e-3,
        "not_comparable": 1,
        "not_comparable_reasons": {"Model Runner V1 does not support: dspark speculative decoding": 1},
    }
    line = "2 loader-v2 cells compared with Model Runner V1's draft: 1 bitwise, 1 disagreeing, max diff 0.004"
    markdown = written["matrix.md"].read_text()
    assert "## Loader differential" in markdown and md(line) in markdown
    assert "1x not comparable: Model Runner V1 does not support: dspark speculative decoding" in markdown
    html = written["matrix.html"].read_text()
    assert line.replace("'", "&#39;") in html and "V1 vs V2: not comparable (Model Runner V1 does not support" in html
    junit = JUnitXml.fromfile(str(written["junit.xml"]))
    cases = {case.name: case for suite in junit for case in suite}
    diff = cases["CPU_ATTN-causal-sink-bf16"]
    assert [type(r) for r in diff.result] == [Error]
    assert "not bitwise equal" in diff.result[0].message
    assert "loader differential: V1 vs V2: bitwise in 0/1 layers, max diff 0.004" in diff.result[0].text
    agreeing = cases["CPU_ATTN-causal-nosink-bf16"].system_out
    assert "loader differential: V1 vs V2: bitwise in 1/1 layers, max diff 0" in agreeing
    SCHEMA.validate(str(written["junit.xml"]))


def test_a_host_limited_cell_is_counted_apart_and_skipped_in_junit_whatever_its_expectation(tmp_path: Path) -> None:
    from harness.expectations import Expectation
    from harness.observation import HOST_LIMIT, Observation
    from harness.result import decide

    cells = list(_cells(tmp_path).values())
    limited = Observation("CPU_ATTN", unavailable=f"{HOST_LIMIT}vLLM asks for a real CUDA device (RuntimeError: x)")
    results = [
        decide(cells[0], limited, Expectation(Verdict.UNAVAILABLE, "expected it", rule=0)),
        decide(cells[1], limited, Expectation(Verdict.PASS, "expected a pass", rule=0)),
        result(cells[2], Verdict.PASS),
    ]
    assert [r.host_limited for r in results] == [True, True, False]
    paths = _reports(write_journal(tmp_path / "main.jsonl", results, [c.id for c in cells[:3]]), tmp_path / "out")
    summary = json.loads(paths["matrix.json"].read_text())["summary"]
    assert summary["host_limited"] == 2
    assert "2 at a host limit, no answer of vLLM's" in paths["matrix.md"].read_text()
    first, second, third = list(next(iter(JUnitXml.fromfile(str(paths["junit.xml"])))))
    for case in (first, second):
        (skipped,) = case.result
        assert isinstance(skipped, Skipped) and skipped.message.startswith(HOST_LIMIT)
    assert third.is_passed
