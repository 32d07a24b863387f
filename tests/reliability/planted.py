"""Planted-fault matrices on the fake lane, and running them the way CI does.

The fake lane (harness.lanes.fake) plants one fault per cell id; these tests check
the harness reports each one exactly and loses nothing else.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.expectations import expectations_for
from harness.journal import JournalWriter, now_iso, read_journals
from harness.lanes.fake import create
from harness.matrix import Cell, expand, load_matrix
from harness.observation import Observation
from harness.reports.build import write_reports
from harness.result import decide
from harness.stages import Stage
from harness.verdict import FAULTS, Verdict

CAUSAL_SINK = ("causal-sink", "causal-nosink", "noncausal-sink", "noncausal-nosink")


PLANTED_FINDING = "planted-fault"


def planted_findings(rules_file: str) -> str:
    """The findings file a planted fault rule names (a rule expecting a fault must name its finding)."""
    return (
        f'[findings]\nrules_in = ["{rules_file}"]\n[[finding]]\nid = "{PLANTED_FINDING}"\n'
        'title = "a fault planted by the test"\nkind = "upstream-bug"\nupstream = "unreported"\n'
        'vllm = ">=0"\nfirst_release = "0.1.0"\nmeasured = "planted"\n'
    )


def cell_ids(backends: Sequence[str], capabilities: Sequence[str] = ()) -> list[str]:
    """The fake matrix's cells, in expansion order."""
    cells = [f"{backend}-{rest}" for backend in backends for rest in CAUSAL_SINK]
    return [f"sm{c.replace('.', '')}-{cell}" for c in capabilities for cell in cells] if capabilities else cells


def _selector(ident: str) -> str:
    """The expectation-rule ``when`` table that matches exactly this fake cell."""
    *capability, backend, causal, sink = ident.split("-")
    when = f'backend = "{backend}", causal = {_toml_value(causal == "causal")}, sink = {_toml_value(sink == "sink")}'
    if capability:
        token = capability[0].removeprefix("sm")
        when = f'capability = "{token[:-1]}.{token[-1]}", ' + when
    return "{ " + when + " }"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f'"{k}" = {_toml_value(v)}' for k, v in value.items()) + " }"
    if isinstance(value, Sequence):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(value)


def write_fake_matrix(
    folder: Path,
    name: str,
    backends: Sequence[str],
    actions: Mapping[str, str] | None = None,
    timeout_s: float = 30,
    sleep_s: float = 0.0,
    expect: Sequence[tuple[str, str, str | None]] | None = None,
    capabilities: Sequence[str] = (),
    lane: str = "fake",
) -> Path:
    """A [capability x] backend x causal x sink matrix; ``expect`` = (cell id, verdict, message substring) rules.
    ``lane``: fake, or fake_gpu (the fake lane under the gpu plugin)."""
    lines = ["[matrix]", f'name = "{name}"', f'lane = "{lane}"', f"timeout_s = {timeout_s!r}"]
    if expect is not None:
        lines.append(f'expectations = "{name}-expect.toml"')
        rules = ["[expectations]", 'default = "pass"']
        faults = [verdict for _, verdict, _ in expect if Verdict(verdict) in FAULTS]
        if faults:
            rules.append(f'findings = "{name}-findings.toml"')
            (folder / f"{name}-findings.toml").write_text(planted_findings(f"{name}-expect.toml"))
        for ident, verdict, message in expect:
            rules += [
                "[[expect]]",
                f"when = {_selector(ident)}",
                f'verdict = "{verdict}"',
                f'reason = "planted {verdict} in {ident}"',
            ]
            if Verdict(verdict) in FAULTS:
                rules.append(f'finding = "{PLANTED_FINDING}"')
            if message is not None:
                rules.append(f'message = "{message}"')
        (folder / f"{name}-expect.toml").write_text("\n".join(rules) + "\n")
    lines.append("[axes]")
    if capabilities:
        lines.append(f"capability = {_toml_value(list(capabilities))}")
    lines += [f"backend = {_toml_value(list(backends))}", "causal = [true, false]", "sink = [true, false]"]
    lines += ["[options]", f"actions = {_toml_value(actions or {})}", f"sleep_s = {sleep_s!r}"]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def inner_env() -> dict[str, str]:
    """This environment minus what would make an inner pytest think it is a worker of the outer one."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}


def matrix_pytest_argv(matrix: Path, report_dir: Path, *extra: str) -> list[str]:
    # An ini file of its own: the inner run must not pick up this repository's pytest settings.
    ini = matrix.parent / "inner-pytest.ini"
    ini.write_text("[pytest]\n")
    return [
        *(sys.executable, "-m", "pytest", "-c", str(ini), "--rootdir", str(matrix.parent)),
        *("-p", "no:cacheprovider", "-q", "--matrix", str(matrix), "--report-dir", str(report_dir), *extra),
    ]


def run_matrix_pytest(
    matrix: Path, report_dir: Path, *extra: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`pytest --matrix ...` in a subprocess, as CI runs it."""
    return subprocess.run(
        matrix_pytest_argv(matrix, report_dir, *extra),
        cwd=matrix.parent,
        env=inner_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_good_reports(folder: Path) -> tuple[Path, Path]:
    """A journal of a small fake run and the reports built from it, made in this process
    (no cell processes: only well-behaved cells). Returns (journal file, report dir)."""
    matrix = load_matrix(
        write_fake_matrix(
            folder, "good", ["A_ATTN", "B_ATTN"], {"A_ATTN-causal-nosink": "mismatch", "B_ATTN-causal-sink": "reject"}
        )
    )
    lane = create(matrix)
    expectations = expectations_for(matrix)
    cells = expand(matrix)
    journal = JournalWriter(folder / "good" / "journal" / "main.jsonl")
    journal.start({"lane": "fake", "matrix": "good", "started": now_iso()}, [cell.id for cell in cells])
    journal.env(dict(lane.environment()))
    for cell in cells:
        journal.cell(decide(cell, lane.observe(cell, lambda stage: None), expectations.for_cell(cell)))
    journal.end()
    journal.close()
    out = folder / "good"
    write_reports(read_journals([journal.path]), out)
    return journal.path, out


def abort_sinks_in_forward(lane: Any) -> None:
    """A plant (``plants=["...planted:abort_sinks_in_forward"]``): every cell with an attention
    sink kills its process in the forward stage, as a kernel that mishandles sinks would."""
    observe = lane.observe

    def planted(cell: Cell, stage_log: Callable[[Stage], None]) -> Observation:
        if cell.get("sink"):
            stage_log(Stage.FORWARD)
            os.abort()
        result: Observation = observe(cell, stage_log)
        return result

    lane.observe = planted


def fail_to_start(lane: Any) -> None:
    """A plant: the lane cannot start in its cell process, as one whose vLLM import fails would."""
    raise RuntimeError("planted: this lane cannot start here")


def hang_at_startup(lane: Any) -> None:
    """A plant: the cell process never reports ready, as a vLLM import stuck on a lock would."""
    while True:
        time.sleep(60)


class _RefusesToUnpickle:
    """Pickles fine, but cannot be rebuilt in the runner, as a vLLM enum cannot where vLLM is not importable."""

    def __reduce__(self) -> tuple[Callable[[], None], tuple[()]]:
        return _refuse, ()


def _refuse() -> None:
    raise ImportError("planted: this object only exists in the cell process")


def unsendable_details(lane: Any) -> None:
    """A plant: sink cells put an object in details that cannot be pickled (a lambda),
    causal no-sink cells one that cannot be unpickled in the runner."""
    observe = lane.observe

    def planted(cell: Cell, stage_log: Callable[[Stage], None]) -> Observation:
        result: Observation = observe(cell, stage_log)
        if cell.get("sink"):
            result.details["callback"] = lambda: None
        elif cell.get("causal"):
            result.details["backend_enum"] = _RefusesToUnpickle()
        return result

    lane.observe = planted
