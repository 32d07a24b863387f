"""Hostile report inputs: each is one line naming the file and the problem, exit status 2,
no traceback, and nothing written.

Journals, JUnit files and matrix.json files arrive from other runners and from pull
requests; `report` and `merge` must refuse a bad one cleanly, whatever it holds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main

from .planted import inner_env, write_good_reports

pytestmark = pytest.mark.process


@dataclass(frozen=True)
class Good:
    journal_lines: list[str]
    cell: dict[str, Any]
    matrix_json: dict[str, Any]
    matrix_json_path: Path
    junit: bytes


@pytest.fixture(scope="module")
def good(tmp_path_factory: pytest.TempPathFactory) -> Good:
    journal, out = write_good_reports(tmp_path_factory.mktemp("good"))
    lines = journal.read_text().splitlines()
    cell = next(json.loads(line)["cell"] for line in lines if json.loads(line)["kind"] == "cell")
    report = out / "matrix.json"
    return Good(lines, cell, json.loads(report.read_text()), report, (out / "junit.xml").read_bytes())


_DROP = object()  # a key to leave out


def _journal_with_cell(**changes: Any) -> Callable[[Good], bytes]:
    def build(good: Good) -> bytes:
        cell = {k: v for k, v in {**good.cell, **changes}.items() if v is not _DROP}
        return (good.journal_lines[0] + "\n" + json.dumps({"kind": "cell", "cell": cell}) + "\n").encode()

    return build


def _laughs() -> bytes:
    entities = ['<!ENTITY lol0 "lol">'] + [f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)]
    return (
        '<?xml version="1.0"?>\n<!DOCTYPE testsuites [\n' + "\n".join(entities) + "\n]>\n"
        '<testsuites><testsuite name="s"><testcase name="&lol9;"/></testsuite></testsuites>\n'
    ).encode()


def _testcase_xml(attributes: str) -> Callable[[Good], bytes]:
    return lambda good: f'<testsuites><testsuite name="s"><testcase {attributes}/></testsuite></testsuites>'.encode()


def _matrix_json(**changes: Any) -> Callable[[Good], bytes]:
    return lambda good: json.dumps(
        {k: v for k, v in {**good.matrix_json, **changes}.items() if v is not _DROP}
    ).encode()


_HUGE_NUMBER = b"9" * 5000  # past Python's int_max_str_digits

# command, input file name, its bytes, a piece of the one-line explanation.
# "diff" gets the bad file as its baseline, "diff-current" as the report it checks.
CASES: list[tuple[str, str, Callable[[Good], bytes], str]] = [
    # report: journals
    ("report", "empty.jsonl", lambda good: b"", "empty journal"),
    (
        "report",
        "torn-middle.jsonl",
        lambda good: "\n".join([good.journal_lines[0], "{torn", *good.journal_lines[1:]]).encode() + b"\n",
        "line 2: not JSON",
    ),
    ("report", "binary.jsonl", lambda good: bytes(range(256)) * 4 + b"\n", "not UTF-8"),
    (
        "report",
        "unknown-verdict.jsonl",
        _journal_with_cell(verdict="exploded"),
        "line 2: verdict 'exploded' is not one of",
    ),
    ("report", "wrong-type.jsonl", _journal_with_cell(duration_s=[1]), "line 2: [1] is not a number"),
    ("report", "axes-list.jsonl", _journal_with_cell(axes=["A_ATTN"]), "line 2: axes must be"),
    ("report", "missing-id.jsonl", _journal_with_cell(id=_DROP), "line 2: missing key 'id'"),
    ("report", "path-id.jsonl", _journal_with_cell(id="../../x"), "is not a cell id"),
    ("report", "outcome-lie.jsonl", _journal_with_cell(verdict="crash", outcome="match"), "contradicts verdict crash"),
    ("report", "array-record.jsonl", lambda good: b"[1, 2, 3]\n", "line 1: not a journal record"),
    ("report", "unknown-kind.jsonl", lambda good: b'{"kind": "party"}\n', "line 1: not a journal record"),
    ("report", "deep.jsonl", lambda good: b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    ("report", "run-types.jsonl", lambda good: b'{"kind": "run", "run": [], "planned": "all"}\n', "run record needs"),
    ("report", "huge-number.jsonl", lambda good: b'{"kind": "end", "at": ' + _HUGE_NUMBER + b"}\n", "number too long"),
    # merge: JUnit
    ("merge", "billion-laughs.xml", lambda good: _laughs(), "unsafe XML refused"),
    (
        "merge",
        "external-entity.xml",
        lambda good: (
            b'<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
            b'<testsuites><testsuite name="s"><testcase name="&x;"/></testsuite></testsuites>\n'
        ),
        "unsafe XML refused",
    ),
    (
        "merge",
        "parameter-entity.xml",
        lambda good: (
            b'<?xml version="1.0"?>\n<!DOCTYPE t [<!ENTITY % p SYSTEM "http://example.invalid/p.dtd"> %p;]>\n'
            b"<testsuites/>\n"
        ),
        "unsafe XML refused",
    ),
    ("merge", "truncated.xml", lambda good: good.junit[: len(good.junit) // 2], "not well-formed XML"),
    ("merge", "wrong-root.xml", lambda good: b'<?xml version="1.0"?>\n<html><body/></html>\n', "not a JUnit report"),
    ("merge", "empty.xml", lambda good: b"", "not well-formed XML"),
    ("merge", "binary.xml", lambda good: bytes(range(256)) * 4, "not well-formed XML"),
    ("merge", "bad-time.xml", _testcase_xml('name="a" time="soon"'), "time 'soon' is not a number of seconds"),
    ("merge", "nameless-case.xml", _testcase_xml('classname="a"'), "a testcase has no name"),
    # merge: matrix.json
    ("merge", "list.json", lambda good: b"[]", "not a matrix report: expected a JSON object"),
    ("merge", "empty.json", lambda good: b"", "not JSON"),
    ("merge", "other-schema.json", _matrix_json(schema="other/9"), "is not a known report schema"),
    ("merge", "cells-object.json", _matrix_json(cells={"a": 1}), "cells: must be a list"),
    ("merge", "no-run.json", _matrix_json(runs=_DROP), "a report needs 'runs'"),
    (
        "merge",
        "unknown-verdict.json",
        lambda good: json.dumps(
            {**good.matrix_json, "cells": [{**good.matrix_json["cells"][0], "verdict": "boom"}]}
        ).encode(),
        "cells[0]: verdict 'boom' is not one of",
    ),
    ("merge", "unknown-type.txt", lambda good: b"hello", "unknown input type"),
    ("merge", "huge-number.json", lambda good: b'{"schema": ' + _HUGE_NUMBER + b"}", "number too long"),
    ("merge", "stale-not-list.json", _matrix_json(stale_expectations=5), "stale_expectations: must be a list"),
    # merge: journals
    (
        "merge",
        "cell-not-object.jsonl",
        lambda good: b'{"kind": "cell", "cell": 5}\n',
        "a cell record must be a JSON object",
    ),
]


DIFF_CASES: list[tuple[str, str, Callable[[Good], bytes], str]] = [
    ("diff", "list.json", lambda good: b"[]", "not a matrix report: expected a JSON object"),
    ("diff-current", "list.json", lambda good: b"[]", "not a matrix report: expected a JSON object"),
    ("diff", "deep.json", lambda good: b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ("diff-current", "binary.json", lambda good: bytes(range(256)), "cannot read"),
    ("diff", "huge-number.json", lambda good: b'{"schema": ' + _HUGE_NUMBER + b"}", "number too long"),
    ("diff-current", "stale-not-list.json", _matrix_json(stale_expectations=5), "stale_expectations: must be a list"),
    ("diff", "junit.xml", lambda good: good.junit, "not a matrix report"),
    ("diff-current", "run-string.json", _matrix_json(runs="fake"), "a report needs 'runs'"),
    ("diff", "other-schema.json", _matrix_json(schema=3), "is not a known report schema"),
    (
        "diff-current",
        "unknown-lane.json",
        lambda good: json.dumps(
            {**good.matrix_json, "cells": [{**good.matrix_json["cells"][0], "lane": "moon"}]}
        ).encode(),
        "cells[0]: lane 'moon' is not one of",
    ),
]
CASES += DIFF_CASES


def _argv(command: str, bad: Path, good: Good, out: Path) -> list[str]:
    if command == "diff":
        return ["diff", str(bad), str(good.matrix_json_path), "--md", str(out / "d.md"), "--json", str(out / "d.json")]
    if command == "diff-current":
        return ["diff", str(good.matrix_json_path), str(bad), "--md", str(out / "d.md"), "--json", str(out / "d.json")]
    return [command, str(bad), "--out", str(out)]


@pytest.mark.parametrize(("command", "name", "content", "problem"), CASES, ids=[f"{c}-{n}" for c, n, _, _ in CASES])
def test_hostile_input_is_one_line_exit_2_and_writes_nothing(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    good: Good,
    command: str,
    name: str,
    content: Callable[[Good], bytes],
    problem: str,
) -> None:
    bad = tmp_path / name
    bad.write_bytes(content(good))
    out = tmp_path / "out"

    status = main(_argv(command, bad, good, out))

    captured = capsys.readouterr()
    assert status == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith(f"dflash-matrix: {bad}: "), lines[0]
    assert problem in lines[0]
    assert "Traceback" not in captured.err
    assert not out.exists(), "bad input must write nothing"


def test_hostile_input_among_good_ones_writes_nothing_and_keeps_old_reports(tmp_path: Path, good: Good) -> None:
    """A real process: the good inputs before and after the bad one change nothing, and the
    previous reports in --out stay byte for byte."""
    journal, previous = write_good_reports(tmp_path)
    before = {path.name: path.read_bytes() for path in previous.iterdir() if path.is_file()}
    bad = tmp_path / "billion-laughs.xml"
    bad.write_bytes(_laughs())

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness.cli",
            "merge",
            str(journal),
            str(bad),
            str(previous / "matrix.json"),
            "--out",
            str(previous),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=inner_env(),
    )

    assert run.returncode == 2
    assert run.stdout == ""
    assert run.stderr == f"dflash-matrix: {bad}: unsafe XML refused (EntitiesForbidden)\n"
    assert {path.name: path.read_bytes() for path in previous.iterdir() if path.is_file()} == before
