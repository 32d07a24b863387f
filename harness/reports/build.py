"""Journal -> junit.xml, matrix.json and matrix.md, all or nothing.

Every report is rendered in memory before the first byte is written, so a bad journal
leaves the output directory as it was; each file is then replaced atomically, so a
report step killed half-way leaves the previous good file, never a truncated one.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.atomic import write_all_atomic
from harness.errors import InputError
from harness.journal import JournalContents
from harness.reports.junit import render_junit
from harness.reports.markdown import render_markdown
from harness.reports.matrix_json import matrix_document, render_matrix_json
from harness.reports.model import RunReport, run_report

RENDERERS: dict[str, Callable[[RunReport], bytes]] = {
    "junit.xml": render_junit,
    "matrix.json": render_matrix_json,
    "matrix.md": render_markdown,
}


def build_matrix_json(contents: JournalContents) -> dict[str, Any]:
    return matrix_document(run_report(contents))


def render_reports(contents: JournalContents) -> dict[str, bytes]:
    report = run_report(contents)
    return {name: render(report) for name, render in RENDERERS.items()}


def write_reports(contents: JournalContents, out_dir: str | Path) -> dict[str, Path]:
    """Write every report into ``out_dir``; returns the path of each by file name."""
    out_dir = Path(out_dir)
    files = render_reports(contents)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(out_dir, "", "output path exists and is not a directory")
    try:
        return write_all_atomic(out_dir, files)
    except OSError as exc:
        raise InputError(out_dir, "", f"cannot write reports: {exc.strerror or exc}") from None
