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
from harness.reports import build_matrix_json, write_reports
from harness.reports.markdown import md
from harness.result import CellResult
from harness.verdict import Verdict

from .samples import BASIC_MATRIX, CONTRACT_KEYS, matrix_from, result, write_journal

SCHEMA = xmlschema.XMLSchema(Path(__file__).parent / "schemas" / "junit-10.xsd")
REPORTS = ("junit.xml", "matrix.json", "matrix.md")
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
    assert suite.name == "dflash-matrix.cpu"
    props = {p.name: p.value for p in suite.properties()}
    assert props["lane"] == "cpu" and props["vllm_version"] == "0.32.0" and props["torch_version"] == "2.13"
    assert props["matrix"] == "basic" and "started_at" in props and "ended_at" not in props
    assert suite.timestamp == props["started_at"]
    cases = {case.name: case for case in suite}
    assert cases["CPU_ATTN-causal-sink-bf16"].classname == "cpu.CPU_ATTN"
    assert cases["CPU_ATTN-causal-sink-bf16"].time == 0.25
    assert cases["CPU_ATTN-causal-sink-bf16"].is_passed
    assert cases["FLASH_ATTN-causal-nosink-bf16"].is_passed  # substituted, as expected

    (mismatch,) = cases["CPU_ATTN-noncausal-sink-bf16"].result
    assert isinstance(mismatch, Failure) and mismatch.type == "regression"
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
        assert cases[ident].classname == "cpu.FLASH_ATTN"

    stale = cases["expectations::stale"]
    assert stale.classname == "cpu.expectations"
    assert isinstance(stale.result[0], Failure) and stale.result[0].type == "stale-expectations"
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (9, 3, 1, 2)


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
    assert data["schema"] == "dflash-matrix/1"
    assert data["run"]["lane"] == "cpu"
    for key in ("platform", "device", "vllm_version", "torch_version", "started_at", "ended_at"):
        assert key in data["run"]
    assert data["run"]["ended_at"] is None  # killed: no end record
    assert (data["run"]["vllm_version"], data["run"]["device"]) == ("0.32.0", "x86_64")
    assert "stale_expectations" not in data["run"]
    contract = CONTRACT_KEYS | {"outcome", "claim_gap"}
    assert all(contract <= cell.keys() for cell in data["cells"])
    assert [c["id"] for c in data["cells"]][:2] == ["CPU_ATTN-causal-sink-bf16", "CPU_ATTN-causal-nosink-bf16"]
    assert data["not_run"] == ["FLASH_ATTN-noncausal-sink-bf16", "FLASH_ATTN-noncausal-nosink-bf16"]
    summary = data["summary"]
    assert (summary["cells"], summary["not_run"], summary["match"], summary["mismatching"]) == (6, 2, 3, 3)
    assert summary["verdicts"]["pass"] == 3 and summary["verdicts"]["timeout"] == 0
    assert summary["outcomes"] == {"match": 3, "unexpected-pass": 1, "regression": 2, "changed": 0}
    assert summary["ok"] is False
    assert [c["id"] for c in data["claims"]["over_claims"]] == ["CPU_ATTN-noncausal-sink-bf16"]
    assert data["claims"]["under_claims"] == [
        {
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
    assert data["summary"]["ok"] is True and data["run"]["ended_at"] is not None


def test_markdown_grid(journal: Path, tmp_path: Path) -> None:
    text = _reports(journal, tmp_path / "out")["matrix.md"].read_text()
    lines = text.splitlines()
    header = "| backend | causal, sink | causal, no sink | non-causal, sink | non-causal, no sink |"
    assert header in lines
    row = next(line for line in lines if line.startswith("| CPU\\_ATTN |"))
    assert row.split(" | ")[1:3] == ["pass", "pass"]
    assert "\u274c mismatch: max abs error 0.5 \\> tolerance 0.02 on FLASH\\_ATTN (expected pass)" in row
    flash = next(line for line in lines if line.startswith("| FLASH\\_ATTN |"))
    assert "\u274c pass (expected unsupported)" in flash
    assert flash.rstrip(" |").endswith("\u2013")  # never ran: an empty grid cell, and listed below
    assert "**The run did not finish**" in text
    assert "### Not as expected (3)" in text
    assert "### Over-claims (1)" in text and "### Under-claims (1)" in text
    assert "### Not run (2)" in text and "- `FLASH_ATTN-noncausal-sink-bf16`" in text
    assert "### Stale expectation rules (1)" in text
    assert "(old rule \\| with a pipe)" in text


def test_markdown_counts_cells_that_other_axes_split(tmp_path: Path) -> None:
    text = BASIC_MATRIX.replace('dtype = ["bfloat16"]', 'dtype = ["bfloat16", "float16", "float32"]')
    text = text.replace('backend = ["CPU_ATTN", "FLASH_ATTN"]', 'backend = ["CPU_ATTN"]')
    text = text.replace("[axes]\n", '[axes]\ncapability = ["8.0", "9.0"]\n')
    cells = _cells(tmp_path, text)
    results = [
        result(
            cell,
            Verdict.MISMATCH if cell.get("dtype") == "float32" and cell.get("capability") == "9.0" else Verdict.PASS,
        )
        for cell in cells.values()
    ]
    path = write_journal(tmp_path / "main.jsonl", results, list(cells))
    md_text = _reports(path, tmp_path / "out")["matrix.md"].read_text()
    assert "### Capability 8.0" in md_text and "### Capability 9.0" in md_text
    sm80, sm90 = md_text.split("### Capability 9.0")
    assert "| CPU\\_ATTN | pass \u00d73 | pass \u00d73 | pass \u00d73 | pass \u00d73 |" in sm80
    assert "pass \u00d72 (bf16, fp16)<br>mismatch \u00d71 (fp32): max abs error 0.5" in sm90
    assert "Not as expected" not in md_text


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
    table_rows = [line for line in written["matrix.md"].read_text().splitlines() if line.startswith("| `")]
    assert len(table_rows) == 1 and table_rows[0].count(" | ") == 5


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
        build_matrix_json(read_journals([tmp_path / "j"]))
