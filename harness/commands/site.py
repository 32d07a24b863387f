"""Build the static compatibility site from saved reports: which backend serves a draft, per vLLM release.

    dflash-matrix site reports/cpu reports/selection history/ --out site/

REPORT is a report folder (its matrix.json), a matrix.json, or a history report's history.json (read
with the matrix.json beside it; a folder holding both is read the same way): cells a history recorded
with no verdict (an environment failure) never count as a change. Any number of lanes and vLLM
releases; the same run given twice counts once (as in `merge`).

Writes, into --out (harness/site): index.html, a form that answers "with vLLM X on GPU generation Y,
which backend serves my draft (method, causal, sink, window, KV dtype, target)?"; per lane and vLLM
release, <lane>-<release>.html (the generation x backend grid with filters) and <lane>-<release>-cells.html
(a permalink per cell: verdict, vLLM's message, finding, repro command) and reports/<lane>-<release>.json
(that page's runs as a matrix.json: what the repro commands read); finding-<id>.html per finding; and
changes-<lane>-<old>-to-<new>.html per pair of consecutive releases of a lane (the cells whose verdict
differs). The pages need no network and no server: open index.html from the folder. The same reports
give the same bytes.

The folder is built beside --out and swapped in whole, so a reader never sees half a site; --out must
be new, empty, or a site this command wrote.

Exit status: 0 when written; 2 on bad input (a missing file, a file that is not a report, an --out
that is or holds an input, or holds other files), nothing written.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from harness.atomic import writable_folder
from harness.errors import InputError
from harness.reports.inputs import Inputs, load_json, read_matrix_json
from harness.reports.matrix_json import render_matrix_json
from harness.reports.merge import collector_paused, merge
from harness.reports.model import Report, RunResults
from harness.site.pages import LanePage, build_site
from harness.site.render import GENERATOR, render_site

HISTORY = "history.json"
MATRIX = "matrix.json"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "reports", nargs="+", metavar="REPORT", help="report folder, matrix.json, or a history report's history.json"
    )
    parser.add_argument("--out", required=True, metavar="DIR", help="the site's folder (new, empty, or an older site)")


@dataclasses.dataclass(frozen=True)
class _Source:
    matrix: Path
    history: Path | None


def _source(raw: str) -> _Source:
    path = Path(raw)
    if path.is_dir():
        if not (path / MATRIX).is_file():
            raise InputError(path, "", f"not a report folder: no {MATRIX}")
        return _Source(path / MATRIX, path / HISTORY if (path / HISTORY).is_file() else None)
    if not path.exists():
        raise InputError(path, "", "no such file or directory")
    if path.name == HISTORY:
        if not (path.parent / MATRIX).is_file():
            raise InputError(path, "", f"a history.json is read with its report: no {MATRIX} beside it")
        return _Source(path.parent / MATRIX, path)
    if path.suffix != ".json":
        raise InputError(path, "", "unknown input type", ("a report folder", MATRIX, HISTORY))
    return _Source(path, None)


def _no_verdict(path: Path) -> dict[tuple[str, str], str]:
    """(run key, cell id) of the cells a history recorded with no verdict in a release."""
    data = load_json(path)
    slots = data.get("slots") if isinstance(data, dict) else None
    if not isinstance(slots, list) or not all(isinstance(slot, dict) for slot in slots):
        raise InputError(path, "slots", "not a history.json (needs a list of slots)")
    found: dict[tuple[str, str], str] = {}
    for index, slot in enumerate(slots):
        runs, releases, cells = slot.get("runs"), slot.get("releases"), slot.get("cells")
        if not (isinstance(runs, list) and isinstance(releases, list) and isinstance(cells, list)):
            raise InputError(path, f"slots[{index}]", "needs runs, releases and cells lists")
        key_of = dict(zip(releases, runs, strict=False))
        for cell in cells:
            for release in cell.get("no_verdict_in", []) if isinstance(cell, dict) else []:
                found[str(key_of.get(release, "")), str(cell.get("id"))] = "no verdict"
    return found


def _refuse_overlap(out: Path, sources: Sequence[_Source]) -> None:
    """The site replaces --out whole: an input inside it, or it, would be lost."""
    target = Path(os.path.abspath(out))
    for source in sources:
        for path in (source.matrix, source.history):
            if path is None:
                continue
            read = Path(os.path.abspath(path))
            if read == target or target in read.parents:
                raise InputError(out, "", "--out holds an input of this command: choose another folder")


def _replaceable(out: Path) -> None:
    """--out is replaced whole: only a new or empty folder or an earlier site may be."""
    if not out.is_dir() or not any(out.iterdir()):
        return
    index = out / "index.html"
    try:
        ours = index.is_file() and f'content="{GENERATOR}"' in index.read_text(encoding="utf-8", errors="replace")
    except OSError:
        ours = False
    if not ours:
        raise InputError(out, "", "--out holds files that are not a dflash-matrix site: choose a new or empty folder")


def _page_report(report: Report, page: LanePage) -> Report:
    """The page's runs alone: the report its repro commands read (one run's cell ids are unique)."""
    keys = {run.key for run in page.runs}
    return Report(
        runs=page.runs,
        rows=tuple(row for row in report.rows if row.run in keys),
        not_run=tuple(item for item in report.not_run if item[0] in keys),
        stale={key: value for key, value in report.stale.items() if key in keys},
        unfinished=frozenset(report.unfinished & keys),
        conflicts=tuple(item for item in report.conflicts if item.run in keys),
        sources=(),  # the inputs' paths are this machine's, not the published site's
    )


@contextlib.contextmanager
def _staging(out: Path) -> Iterator[Path]:
    """A folder beside --out to build the site in; removed unless it was swapped in."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".new"))
    try:
        yield staging
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_site(files: Mapping[str, bytes], out: Path) -> None:
    """Every file into a staging folder, then the folder renamed over --out (the old site moved aside
    first and removed after): a reader finds the old site or the new one, never a mix."""
    try:
        with _staging(out) as staging:
            for name, data in files.items():
                path = staging / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                path.chmod(0o644)
            staging.chmod(0o755)
            old = None
            if out.exists():
                old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".old"))
                os.replace(out, old / "site")
            try:
                os.replace(staging, out)
            except BaseException:
                if old is not None:
                    os.replace(old / "site", out)
                raise
            finally:
                if old is not None:
                    shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        raise InputError(exc.filename or out, "", f"cannot write the site: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    out = writable_folder(Path(args.out), "--out")
    sources = [_source(raw) for raw in args.reports]
    _refuse_overlap(out, sources)
    _replaceable(out)
    with collector_paused():
        results: list[RunResults] = []
        no_verdict: dict[tuple[str, str], str] = {}
        for source in dict.fromkeys(sources):
            results.extend(read_matrix_json(source.matrix))
            if source.history is not None:
                no_verdict.update(_no_verdict(source.history))
        report = merge(Inputs(tuple(results), ()))
        if not report.rows:
            raise InputError(args.reports[0], "", "the reports hold no cell: nothing to show")
        site = build_site(report, no_verdict)
        files = render_site(site)
        for page in site.pages:
            files[page.report] = render_matrix_json(_page_report(report, page))
    write_site(files, out)
    print(
        f"wrote {len(files)} files to {out}: {len(site.pages)} lane page(s), {len(site.findings)} finding page(s), "
        f"{len(site.changes)} what-changed page(s); open {out / 'index.html'}"
    )
    return 0
