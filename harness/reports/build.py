"""Report -> junit.xml, matrix.json, matrix.md and matrix.html, all or nothing.

Every file is rendered in memory before the first byte is written, so bad input leaves
the output directory as it was; each file then replaces the old one atomically, so a
report step killed half-way leaves the previous good file, never a truncated one. One
run (a journal) and many (``merge``) go through the same renderers.
"""

from __future__ import annotations

from pathlib import Path

from harness.atomic import write_all_atomic
from harness.errors import InputError
from harness.journal import JournalContents
from harness.reports.device_grid import build_grids
from harness.reports.html import render_html
from harness.reports.junit import render_junit, render_junit_per_run
from harness.reports.markdown import render_markdown
from harness.reports.matrix_json import render_matrix_json
from harness.reports.merge import report_from_journal
from harness.reports.model import Report

REPORT_FILES = ("junit.xml", "matrix.json", "matrix.md", "matrix.html")


def render_reports(report: Report, *, junit_per_run: bool = False) -> dict[str, bytes]:
    grids = build_grids(report)  # shared by the Markdown and HTML views
    files = {
        "junit.xml": render_junit(report),
        "matrix.json": render_matrix_json(report),
        # A journal may carry lone surrogates from an exception message; UTF-8 cannot (JSON and
        # XML have their own escapes), so the text views write them as "?".
        "matrix.md": render_markdown(report, grids).encode("utf-8", "replace"),
        "matrix.html": render_html(report, grids).encode("utf-8", "replace"),
    }
    if junit_per_run:
        files.update(render_junit_per_run(report))
    return files


def write_files(files: dict[str, bytes], out_dir: str | Path) -> dict[str, Path]:
    """Write rendered files into ``out_dir``; returns the path of each by file name."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(out_dir, "", "output path exists and is not a directory")
    try:
        return write_all_atomic(out_dir, files)
    except OSError as exc:
        raise InputError(out_dir, "", f"cannot write reports: {exc.strerror or exc}") from None


def write_reports(contents: JournalContents, out_dir: str | Path) -> dict[str, Path]:
    """One run's journal -> every report in ``out_dir``."""
    return write_files(render_reports(report_from_journal(contents)), out_dir)
