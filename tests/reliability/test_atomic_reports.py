"""A report step that fails part-way never leaves a truncated file in place of a good one,
nor temporary files behind."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xmlschema

from harness.cli import main
from harness.journal import read_journals
from harness.reports import build

from .planted import write_good_reports

pytestmark = pytest.mark.pure

REPORTS = ("junit.xml", "matrix.json", "matrix.md")
SCHEMA = Path(__file__).parents[1] / "core" / "schemas" / "junit-10.xsd"


def snapshot(folder: Path) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


def test_renderer_failing_leaves_every_previous_report_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, out = write_good_reports(tmp_path)
    before = snapshot(out)
    assert set(REPORTS) <= set(before)

    def broken(*args: Any) -> str:
        raise RuntimeError("renderer bug")

    monkeypatch.setattr(build, "render_markdown", broken)
    with pytest.raises(RuntimeError, match="renderer bug"):
        build.write_reports(read_journals([journal]), out)

    assert snapshot(out) == before


def _fail_on_call(number: int, real: Callable[..., Any], error: OSError) -> Callable[..., Any]:
    calls = []

    def fake(*args: Any) -> Any:
        calls.append(args)
        if len(calls) == number:
            raise error
        return real(*args)

    return fake


@pytest.mark.parametrize(
    ("function", "call", "problem"),
    [
        ("fsync", 2, "No space left on device"),  # matrix.json's data never reaches the disk
        ("replace", 3, "Read-only file system"),  # matrix.md is written but cannot be renamed
    ],
)
def test_write_failing_midway_leaves_whole_files_and_no_temp_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    function: str,
    call: int,
    problem: str,
) -> None:
    journal, out = write_good_reports(tmp_path)
    # A changed journal, so that a new report differs from the old one byte for byte.
    journal.write_text(journal.read_text().replace('"matrix": "good"', '"matrix": "good-again"'))
    old = snapshot(out)
    code = errno.ENOSPC if function == "fsync" else errno.EROFS
    monkeypatch.setattr(os, function, _fail_on_call(call, getattr(os, function), OSError(code, os.strerror(code))))

    status = main(["report", str(journal), "--out", str(out)])

    monkeypatch.undo()
    err = capsys.readouterr().err
    assert status == 2
    assert err == f"dflash-matrix: {out}: cannot write reports: {problem}\n"
    now = snapshot(out)
    assert set(now) == set(old), f"temporary files left: {sorted(set(now) - set(old))}"
    replaced = [name for name in REPORTS if now[name] != old[name]]
    if function == "fsync":  # every temporary is written before any rename: the old set stays whole
        assert replaced == []
    else:  # a rename that fails after others succeeded is not rolled back: each file is still whole
        assert replaced == list(REPORTS[: call - 1])
        assert b"good-again" in now["junit.xml"]
    xmlschema.XMLSchema(SCHEMA).validate(out / "junit.xml")
