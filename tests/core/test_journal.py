"""The journal: what a killed run leaves is readable, and what a hostile file holds is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.errors import InputError
from harness.journal import JournalWriter, read_journals
from harness.matrix import expand
from harness.result import CellResult
from harness.verdict import Verdict

from .samples import journal_lines, matrix_from, result, rewrite_lines, write_journal

pytestmark = pytest.mark.pure


@pytest.fixture
def cells(tmp_path: Path) -> list[Any]:
    return list(expand(matrix_from(tmp_path)))


def test_round_trip(tmp_path: Path, cells: list[Any]) -> None:
    results = [result(cells[0], Verdict.PASS), result(cells[1], Verdict.CRASH, Verdict.PASS)]
    path = write_journal(tmp_path / "j" / "main.jsonl", results, [c.id for c in cells])
    contents = read_journals([tmp_path / "j"])
    assert contents.cells == results
    assert contents.files == [path]
    assert contents.runs[0]["lane"] == "cpu"
    assert contents.env["vllm"] == "0.32.0"
    assert contents.ended and contents.started_at and contents.ended_at
    assert contents.started_at <= contents.ended_at
    assert contents.not_run == [c.id for c in cells[2:]]
    assert [kind["kind"] for kind in journal_lines(path)] == ["run", "env", "cell", "cell", "end"]


def test_torn_last_line_is_ignored_and_the_rest_stands(tmp_path: Path, cells: list[Any]) -> None:
    path = write_journal(tmp_path / "main.jsonl", [result(cells[0], Verdict.PASS)], [c.id for c in cells], end=False)
    whole = json.dumps({"kind": "cell", "cell": result(cells[1], Verdict.PASS).to_json()})
    with path.open("a") as handle:
        handle.write(whole[: len(whole) // 2])
    contents = read_journals([path])
    assert [c.id for c in contents.cells] == [cells[0].id]
    assert not contents.ended and contents.ended_at is None
    assert contents.not_run == [c.id for c in cells[1:]]


def test_resuming_after_a_kill_drops_the_torn_fragment(tmp_path: Path, cells: list[Any]) -> None:
    path = write_journal(tmp_path / "main.jsonl", [result(cells[0], Verdict.PASS)], [c.id for c in cells], end=False)
    with path.open("a") as handle:
        handle.write('{"kind": "cell", "cell": {"id": "CPU_')
    write_journal(path, [result(cells[1], Verdict.MISMATCH, Verdict.PASS)], [c.id for c in cells])
    contents = read_journals([path])
    assert [c.id for c in contents.cells] == [cells[0].id, cells[1].id]
    assert len(contents.runs) == 2 and contents.ended


def test_a_later_record_of_a_cell_replaces_the_earlier(tmp_path: Path, cells: list[Any]) -> None:
    retried = [result(cells[0], Verdict.CRASH, Verdict.PASS), result(cells[0], Verdict.PASS)]
    contents = read_journals([write_journal(tmp_path / "main.jsonl", retried, [cells[0].id])])
    assert [c.verdict for c in contents.cells] == [Verdict.PASS]


def test_workers_journals_are_read_together(tmp_path: Path, cells: list[Any]) -> None:
    planned = [c.id for c in cells]
    write_journal(tmp_path / "gw0.jsonl", [result(cells[0], Verdict.PASS)], planned)
    write_journal(tmp_path / "gw1.jsonl", [result(cells[1], Verdict.PASS)], planned)
    (tmp_path / "notes.txt").write_text("not a journal")
    contents = read_journals([tmp_path])
    assert len(contents.files) == 2
    assert contents.not_run == planned[2:]  # planned twice, listed once


def test_same_id_in_two_lanes_is_two_cells(tmp_path: Path, cells: list[Any]) -> None:
    cpu = result(cells[0], Verdict.PASS)
    fake = CellResult.from_json({**cpu.to_json(), "lane": "fake"})
    write_journal(tmp_path / "cpu.jsonl", [cpu], [cpu.id])
    write_journal(tmp_path / "fake.jsonl", [fake], [cpu.id], lane="fake")
    contents = read_journals([tmp_path])
    assert sorted(c.lane for c in contents.cells) == ["cpu", "fake"]
    assert contents.not_run_cells == []


def _valid_lines(tmp_path: Path, cells: list[Any]) -> list[dict[str, Any]]:
    path = write_journal(tmp_path / "source.jsonl", [result(cells[0], Verdict.PASS)], [cells[0].id])
    return journal_lines(path)


def _cell_with(**changes: Any) -> Any:
    def edit(lines: list[dict[str, Any]]) -> list[object]:
        run, env, cell, end = lines
        cell["cell"].update(changes)
        return [run, env, cell, end]

    return edit


def _run_with(**changes: Any) -> Any:
    def edit(lines: list[dict[str, Any]]) -> list[object]:
        lines[0]["run"].update(changes)
        return list(lines)

    return edit


HOSTILE = {
    "not-json": (lambda lines: [lines[0], "{not json", *lines[1:]], "line 2: not JSON"),
    "json-but-not-a-record": (lambda lines: [lines[0], "[1, 2]", *lines[1:]], "line 2: not a journal record"),
    "unknown-kind": (lambda lines: [{"kind": "delete"}, *lines], "line 1: not a journal record"),
    "deeply-nested": (lambda lines: ["[" * 100000 + "]" * 100000, *lines], "line 1"),
    "unknown-verdict": (_cell_with(verdict="fine"), "line 3: verdict 'fine' is not one of: pass, unsupported"),
    "unknown-expected": (_cell_with(expected=None), "line 3: expected None is not one of"),
    "unknown-stage": (_cell_with(stage="launch"), "stage 'launch' is not one of: config, select"),
    "verdict-wrong-type": (_cell_with(verdict=["pass"]), "verdict ['pass']"),
    "backends-a-string": (_cell_with(observed_backends="CPU_ATTN"), "observed_backends must be a list of strings"),
    "axes-a-list": (_cell_with(axes=[["backend", "CPU_ATTN"]]), "axes must be a non-empty object"),
    "axis-value-nested": (_cell_with(axes={"backend": {"x": 1}}), "axes.backend must be a string"),
    "claim-a-list": (_cell_with(claim=[True]), "claim must be null or an object"),
    "claim-reasons-a-string": (_cell_with(claim={"supported": True, "reasons": "x"}), "claim.reasons"),
    "error-not-a-number": (_cell_with(max_abs_err="big"), "'big' is not a number"),
    "message-a-number": (_cell_with(message=3), "message must be a string"),
    "id-with-markup": (_cell_with(id="<script>"), "'<script>' is not a cell id"),
    "id-missing": (_cell_with(id=None), "id must be a non-empty string"),
    "lane-unknown": (_cell_with(lane="tpu"), "lane 'tpu' is not one of"),
    "outcome-contradicts": (_cell_with(outcome="regression"), "outcome 'regression' contradicts"),
    "claim-gap-contradicts": (_cell_with(claim_gap="over-claim"), "claim_gap 'over-claim' contradicts"),
    "details-a-list": (_cell_with(details=[1]), "details must be an object"),
    "cell-missing-key": (lambda lines: [lines[0], {"kind": "cell", "cell": {"id": "x"}}], "missing key"),
    "run-without-lane": (_run_with(lane=None), "line 1: run.lane: None is not a lane"),
    "stale-not-strings": (_run_with(stale_expectations="x"), "run.stale_expectations: must be a list of strings"),
    "planned-not-ids": (
        lambda lines: [{**lines[0], "planned": ["a b"]}, *lines[1:]],
        "planned: 'a b' is not a cell id",
    ),
    "bad-time": (lambda lines: [*lines[:3], {"kind": "end", "at": "yesterday"}], "line 4: at: 'yesterday'"),
    "env-not-object": (lambda lines: [lines[0], {"kind": "env", "env": []}], "env record needs"),
    "empty": (lambda lines: [], "empty journal"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_journal_is_one_line_naming_the_file_and_line(tmp_path: Path, cells: list[Any], case: str) -> None:
    edit, fragment = HOSTILE[case]
    path = rewrite_lines(tmp_path / "bad.jsonl", edit(_valid_lines(tmp_path, cells)))
    with pytest.raises(InputError) as caught:
        read_journals([path])
    line = caught.value.line()
    assert line.startswith(f"{path}: ") and "\n" not in line
    assert fragment in line


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\xff\xfe{}\n")
    with pytest.raises(InputError, match="not UTF-8"):
        read_journals([path])


def test_missing_journal_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="journal not found"):
        read_journals([tmp_path / "gone.jsonl"])
    with pytest.raises(InputError, match="no journal files"):
        read_journals([tmp_path])


def test_writer_flushes_each_record(tmp_path: Path, cells: list[Any]) -> None:
    writer = JournalWriter(tmp_path / "main.jsonl")
    writer.start({"lane": "cpu"}, [cells[0].id])
    writer.cell(result(cells[0], Verdict.PASS))
    # Still open, as when the process is killed now: everything so far is on disk.
    assert [c.id for c in read_journals([tmp_path]).cells] == [cells[0].id]
    writer.close()
