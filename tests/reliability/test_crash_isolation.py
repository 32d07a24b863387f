"""A cell that kills its process is a `crash` at its stage; every other cell still runs.

40 cells, one process-killing fault per 10 (abort, segfault, os._exit), plus one cell of
every other planted verdict, run through pytest as CI runs it, with and without xdist.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from harness.journal import read_journals
from harness.verdict import Verdict

from .planted import cell_ids, run_matrix_pytest, write_fake_matrix

pytestmark = pytest.mark.process

BACKENDS = [f"{letter}_ATTN" for letter in "ABCDEFGHIJ"]
CELLS = cell_ids(BACKENDS)
PLANTED = {
    "B_ATTN-causal-nosink": "abort",
    "D_ATTN-noncausal-sink": "segfault",
    "G_ATTN-causal-sink": "exit",
    "J_ATTN-noncausal-nosink": "abort",
    "A_ATTN-noncausal-sink": "raise",
    "C_ATTN-causal-sink": "mismatch",
    "E_ATTN-causal-nosink": "reject",
    "F_ATTN-noncausal-nosink": "substitute",
    "H_ATTN-noncausal-sink": "lose-request",
    "I_ATTN-causal-sink": "unavailable",
}
KILLERS = [ident for ident, action in PLANTED.items() if action in ("abort", "segfault", "exit")]

# (verdict, stage, message) each planted cell must be journaled with, exactly.
FORWARD_DEATH = "ProcessDied: cell process {} during stage forward"
EXACT = {
    "B_ATTN-causal-nosink": ("crash", "forward", FORWARD_DEATH.format("killed by SIGABRT")),
    "D_ATTN-noncausal-sink": ("crash", "forward", FORWARD_DEATH.format("killed by SIGSEGV")),
    "G_ATTN-causal-sink": ("crash", "forward", FORWARD_DEATH.format("exited with status 3")),
    "J_ATTN-noncausal-nosink": ("crash", "forward", FORWARD_DEATH.format("killed by SIGABRT")),
    "A_ATTN-noncausal-sink": ("crash", "forward", "RuntimeError: planted failure in forward"),
    "C_ATTN-causal-sink": ("mismatch", "compare", "max abs error 1 > tolerance 0.001 on C_ATTN, C_ATTN"),
    "E_ATTN-causal-nosink": ("unsupported", "select", "attention sinks not supported"),
    "F_ATTN-noncausal-nosink": ("substituted", None, "requested F_ATTN, ran FAKE_OTHER, FAKE_OTHER"),
    "H_ATTN-noncausal-sink": (
        "wrong-backend",
        "build",
        "requested H_ATTN: the platform selects H_ATTN, but draft layers carry FAKE_OTHER, FAKE_OTHER",
    ),
    "I_ATTN-causal-sink": ("unavailable", None, "I_ATTN is not installed here"),
}
EXPECT_ALL = [
    ("B_ATTN-causal-nosink", "crash", "SIGABRT"),
    ("D_ATTN-noncausal-sink", "crash", "SIGSEGV"),
    ("G_ATTN-causal-sink", "crash", "exited with status 3"),
    ("J_ATTN-noncausal-nosink", "crash", "SIGABRT"),
    ("A_ATTN-noncausal-sink", "crash", "planted failure"),
    ("C_ATTN-causal-sink", "mismatch", None),
    ("E_ATTN-causal-nosink", "unsupported", "sinks"),
    ("F_ATTN-noncausal-nosink", "substituted", None),
    ("H_ATTN-noncausal-sink", "wrong-backend", None),
    ("I_ATTN-causal-sink", "unavailable", None),
]


def expected_record(ident: str) -> tuple[str, str | None, str]:
    if ident in EXACT:
        return EXACT[ident]
    backend = ident.split("-")[0]
    return ("pass", None, f"{backend}, {backend}: max abs error 0 <= 0.001")


def journaled(report_dir: Path) -> dict[str, tuple[str, str | None, str]]:
    """Every cell record in the journal, refusing duplicates: a cell must be journaled once."""
    lines = [
        json.loads(line)
        for path in sorted((report_dir / "journal").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    records = [line["cell"] for line in lines if line["kind"] == "cell"]
    twice = [ident for ident, n in Counter(r["id"] for r in records).items() if n > 1]
    assert not twice, f"journaled more than once: {twice}"
    return {r["id"]: (r["verdict"], r["stage"], r["message"]) for r in records}


def failed_items(stdout: str) -> list[str]:
    return sorted(re.findall(r"^FAILED \S+::(\S+)", stdout, flags=re.MULTILINE))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist2"])
def test_crashes_are_isolated_and_reported_exactly(tmp_path: Path, workers: list[str]) -> None:
    matrix = write_fake_matrix(tmp_path, "crashes", BACKENDS, PLANTED, expect=EXPECT_ALL)
    out = tmp_path / "out"

    run = run_matrix_pytest(matrix, out, *workers)

    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"{len(CELLS) + 1} passed" in run.stdout  # the cells plus the stale-expectations check
    assert journaled(out) == {ident: expected_record(ident) for ident in CELLS}
    contents = read_journals([out / "journal"])
    assert contents.not_run == []
    assert len(contents.runs) == (2 if workers else 1)
    report = json.loads((out / "matrix.json").read_text())
    assert sorted(cell["id"] for cell in report["cells"]) == sorted(CELLS)
    assert Counter(cell["verdict"] for cell in report["cells"]) == Counter(expected_record(ident)[0] for ident in CELLS)


def test_unexpected_crashes_fail_the_run_and_only_their_cells(tmp_path: Path) -> None:
    # One crash nobody expected, one expected with the wrong signal: exactly these two fail.
    expect = [rule for rule in EXPECT_ALL if rule[0] != "G_ATTN-causal-sink"]
    expect = [(i, v, "SIGSEGV") if i == "J_ATTN-noncausal-nosink" else (i, v, m) for i, v, m in expect]
    matrix = write_fake_matrix(tmp_path, "red", BACKENDS, PLANTED, expect=expect)
    out = tmp_path / "out"

    run = run_matrix_pytest(matrix, out, "-rf")

    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    assert failed_items(run.stdout) == ["G_ATTN-causal-sink", "J_ATTN-noncausal-nosink"]
    assert f"2 failed, {len(CELLS) - 1} passed" in run.stdout
    assert "expected pass, observed crash at stage forward" in run.stdout
    assert journaled(out) == {ident: expected_record(ident) for ident in CELLS}
    verdicts = {c.id: c for c in read_journals([out / "journal"]).cells}
    assert verdicts["G_ATTN-causal-sink"].expected == Verdict.PASS
    assert verdicts["G_ATTN-causal-sink"].verdict == Verdict.CRASH
    assert {ident for ident, cell in verdicts.items() if not cell.ok} == set(failed_items(run.stdout))


def test_a_crash_replaces_only_the_process_of_its_own_key(tmp_path: Path) -> None:
    """Lanes with per-key processes (the selection lane: one per capability), with the
    tox selection env's `-n 2 --dist loadgroup`: each key keeps to one worker and process,
    and a crash replaces that key's process only."""
    capabilities = ["8.0", "9.0"]
    cells = cell_ids(["A_ATTN", "B_ATTN"], capabilities)
    crashes = {"sm80-A_ATTN-noncausal-sink": "abort", "sm90-B_ATTN-causal-nosink": "segfault"}
    expect = [("sm80-A_ATTN-noncausal-sink", "crash", "SIGABRT"), ("sm90-B_ATTN-causal-nosink", "crash", "SIGSEGV")]
    matrix = write_fake_matrix(
        tmp_path, "keyed", ["A_ATTN", "B_ATTN"], crashes, expect=expect, capabilities=capabilities
    )
    out = tmp_path / "out"

    run = run_matrix_pytest(matrix, out, "-n", "2", "--dist", "loadgroup")

    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    verdicts = {ident: record[0] for ident, record in journaled(out).items()}
    assert verdicts == {ident: "crash" if ident in crashes else "pass" for ident in cells}
    pids_by_key: dict[str, list[set[int]]] = {}
    for path in sorted((out / "journal").glob("*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        for record in (r["cell"] for r in records if r["kind"] == "cell"):
            key = record["id"].split("-")[0]
            spans = pids_by_key.setdefault(key, [set()])
            if record["id"] in crashes:
                spans.append(set())  # the process after the crash is another one
            else:
                spans[-1].add(record["details"]["pid"])
    assert sorted(pids_by_key) == ["sm80", "sm90"], "each key's cells ran on one worker"
    for key, spans in pids_by_key.items():
        assert len(spans) == 2 and all(len(span) == 1 for span in spans), (key, spans)
        assert spans[0] != spans[1], f"{key}: the crashed process was replaced"
    sm80, sm90 = ({pid for span in pids_by_key[key] for pid in span} for key in ("sm80", "sm90"))
    assert not sm80 & sm90, "keys never share a process"
