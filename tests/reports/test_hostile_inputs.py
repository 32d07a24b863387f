"""Report inputs come from other machines and pull requests: every bad one is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main

from .shards import cell, write_shard

pytestmark = pytest.mark.pure

BILLION_LAUGHS = """<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<testsuites><testsuite name="x"><testcase name="&lol3;"/></testsuite></testsuites>
"""
EXTERNAL_ENTITY = """<?xml version="1.0"?>
<!DOCTYPE t [<!ENTITY secret SYSTEM "file:///etc/passwd">]>
<testsuites><testsuite name="&secret;"/></testsuites>
"""
CELL = cell().to_json()

BAD_INPUTS: dict[str, tuple[str | bytes, str]] = {
    "laughs.xml": (BILLION_LAUGHS, "unsafe XML refused"),
    "external.xml": (EXTERNAL_ENTITY, "unsafe XML refused"),
    "truncated.xml": ('<testsuites><testsuite name="x"><testcase name="a"', "not well-formed XML"),
    "html.xml": ("<html><body>not junit</body></html>", "not a JUnit report: wrong root element"),
    "empty.xml": ("", "not well-formed XML"),
    "notjson.json": ("{not json", "not JSON"),
    "list.json": ("[1, 2]", "expected a JSON object"),
    "schema.json": (json.dumps({"schema": "other/9", "cells": []}), "'other/9' is not a known report schema"),
    "norun.json": (json.dumps({"schema": "dflash-matrix/2", "cells": []}), "runs: missing"),
    "badcell.json": (
        json.dumps({"schema": "dflash-matrix/1", "run": {"lane": "gpu"}, "cells": [{**CELL, "verdict": "great"}]}),
        "cells[0]: verdict 'great' is not one of",
    ),
    "badrun.json": (
        json.dumps({"schema": "dflash-matrix/1", "runs": [{"key": "a"}], "cells": [{**CELL, "run": "b"}]}),
        "cells[0].run: 'b' names no run",
    ),
    "deep.json": ("[" * 100000 + "]" * 100000, "nested too deeply"),
    "garbage.jsonl": ('{"kind": "run"\n{"kind": "cell"}\n', "line 1: not JSON"),
    "binary.json": (b"\xff\xfe\x00garbage", "cannot read"),
    "notes.txt": ("hello", "unknown input type"),
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_merge_refuses_bad_input_with_one_line_and_writes_nothing(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    content, problem = BAD_INPUTS[name]
    bad = tmp_path / name
    if isinstance(content, bytes):
        bad.write_bytes(content)
    else:
        bad.write_text(content)
    good = write_shard(tmp_path / "good", [cell()])
    out = tmp_path / "out"
    assert main(["merge", str(good), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert str(bad) in err and problem in err, err
    assert not out.exists()


def test_a_missing_input_and_an_empty_directory_are_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["merge", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")]) == 2
    assert "nope.json: no such file or directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert main(["merge", str(tmp_path / "empty"), "--out", str(tmp_path / "o")]) == 2
    assert "directory holds no report files" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["laughs.xml", "notjson.json", "schema.json", "notes.txt"])
def test_diff_refuses_bad_input(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    content, _ = BAD_INPUTS[name]
    bad = tmp_path / name
    bad.write_text(str(content))
    good = write_shard(tmp_path / "good", [cell()])
    assert main(["diff", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(bad) in err


def test_diff_of_a_directory_without_matrix_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_shard(tmp_path / "good", [cell()])
    assert main(["diff", str(good), str(tmp_path)]) == 2
    assert "report directory holds no matrix.json" in capsys.readouterr().err


def test_an_output_path_that_is_a_file_is_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good = write_shard(tmp_path / "good", [cell()])
    taken = tmp_path / "taken"
    taken.write_text("keep me")
    assert main(["merge", str(good), "--out", str(taken)]) == 2
    assert "output path exists and is not a directory" in capsys.readouterr().err
    assert taken.read_text() == "keep me"
