"""SIGKILL of a whole run mid-matrix: the journal keeps every finished cell, `report`
rebuilds valid reports from it naming the cells that never ran, and `--resume` runs
only those."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import xmlschema
from junitparser import JUnitXml, Skipped

from harness.reports.text import md

from .planted import cell_ids, inner_env, matrix_pytest_argv, run_matrix_pytest, write_fake_matrix

pytestmark = pytest.mark.process

BACKENDS = ["A_ATTN", "B_ATTN", "C_ATTN", "D_ATTN"]
CELLS = cell_ids(BACKENDS)
PLANTED = {"A_ATTN-noncausal-sink": "abort", "B_ATTN-causal-sink": "mismatch"}
EXPECT = [("A_ATTN-noncausal-sink", "crash", "SIGABRT"), ("B_ATTN-causal-sink", "mismatch", None)]
KILL_AFTER = 5  # journaled cells
SCHEMA = Path(__file__).parents[1] / "core" / "schemas" / "junit-10.xsd"


def cell_records(journal_dir: Path) -> list[dict[str, Any]]:
    records = []
    for path in sorted(journal_dir.glob("*.jsonl")):
        # Complete lines only: a torn last line is no record (the journal reader agrees).
        for line in path.read_text().split("\n")[:-1]:
            record = json.loads(line)
            if record["kind"] == "cell":
                records.append(record["cell"])
    return records


def kill_mid_matrix(matrix: Path, out: Path) -> list[dict[str, Any]]:
    """Start the run in its own process group and SIGKILL the group once KILL_AFTER cells are journaled."""
    run = subprocess.Popen(
        matrix_pytest_argv(matrix, out),
        cwd=matrix.parent,
        env=inner_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and run.poll() is None:
            journal = out / "journal"
            if journal.exists() and len(cell_records(journal)) >= KILL_AFTER:
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before it could be killed: make the cells slower"
    finally:
        os.killpg(run.pid, signal.SIGKILL)
        run.wait(10)
    assert run.returncode == -signal.SIGKILL
    return cell_records(out / "journal")


def report(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "report", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=inner_env(),
    )


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["resume-serial", "resume-xdist2"])
def test_killed_run_is_reported_from_its_journal_and_resumed_without_rerunning(
    tmp_path: Path, workers: list[str]
) -> None:
    matrix = write_fake_matrix(tmp_path, "killed", BACKENDS, PLANTED, sleep_s=0.3, expect=EXPECT)
    out = tmp_path / "out"

    before = kill_mid_matrix(matrix, out)

    done = [record["id"] for record in before]
    assert KILL_AFTER <= len(done) < len(CELLS)
    assert done == CELLS[: len(done)], "cells are journaled in order, none lost before the kill"
    assert not (out / "matrix.json").exists(), "a killed run writes no reports itself"
    not_run = CELLS[len(done) :]
    # What a kill in the middle of a journal write leaves; the write is one small syscall,
    # so the real kill above almost never does: plant it.
    with (out / "journal" / "main.jsonl").open("a") as journal:
        journal.write('{"kind": "cell", "cell": {"id": "' + not_run[0])

    rebuilt = report(str(out / "journal"), "--out", str(out))

    assert rebuilt.returncode == 0, rebuilt.stderr
    assert rebuilt.stderr == ""
    xmlschema.XMLSchema(SCHEMA).validate(out / "junit.xml")
    cases = {case.name: case for suite in JUnitXml.fromfile(str(out / "junit.xml")) for case in suite}
    assert sorted(cases) == sorted([*CELLS, "run::incomplete"])
    # Every consumer counts skipped as green: the killed run itself is one red testcase.
    assert cases["run::incomplete"].is_error
    assert f"{len(not_run)} of {len(CELLS)} planned cells not run" in (cases["run::incomplete"].result[0].message or "")
    skipped = sorted(name for name, case in cases.items() if any(isinstance(r, Skipped) for r in case.result))
    assert skipped == sorted(not_run)
    assert all("not run" in case.result[0].message for name, case in cases.items() if name in not_run)
    document = json.loads((out / "matrix.json").read_text())
    assert [cell["id"] for cell in document["cells"]] == done
    assert [item["id"] for item in document["not_run"]] == not_run
    assert document["summary"]["ok"] is False and document["runs"][0]["incomplete"] is True
    markdown = (out / "matrix.md").read_text()
    assert f"{len(not_run)} planned but not run" in markdown and "did not complete" in markdown
    assert all(md(ident) in markdown for ident in not_run)

    journaled_before = {path.name: path.read_text() for path in (out / "journal").glob("*.jsonl")}

    resumed = run_matrix_pytest(matrix, out, "--resume", *workers)

    assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
    for name, text in journaled_before.items():
        assert (out / "journal" / name).read_text().startswith(text.rsplit("\n", 1)[0]), "old records kept"
    after = cell_records(out / "journal")
    new = [record for record in after if record not in before]
    assert len(after) == len(before) + len(new)
    assert sorted(record["id"] for record in new) == sorted(not_run), "only the cells never run were run"
    assert Counter(record["id"] for record in after) == Counter(CELLS)
    pids_before = {record["details"].get("pid") for record in before} - {None}
    pids_after = {record["details"].get("pid") for record in new} - {None}
    assert pids_before and pids_after and not pids_before & pids_after
    final = json.loads((out / "matrix.json").read_text())
    assert sorted(cell["id"] for cell in final["cells"]) == sorted(CELLS)
    assert final["not_run"] == []
    verdicts = {cell["id"]: cell["verdict"] for cell in final["cells"]}
    assert verdicts == {
        ident: {"A_ATTN-noncausal-sink": "crash", "B_ATTN-causal-sink": "mismatch"}.get(ident, "pass")
        for ident in CELLS
    }
    xmlschema.XMLSchema(SCHEMA).validate(out / "junit.xml")


def _cell_processes_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the parent-death signal is Linux's")
def test_killing_the_runner_alone_takes_its_hung_cell_process_with_it(tmp_path: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "orphan", ["A_ATTN"], {"A_ATTN-causal-sink": "hang"}, timeout_s=120)
    run = subprocess.Popen(
        matrix_pytest_argv(matrix, tmp_path / "out"),
        cwd=tmp_path,
        env=inner_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not (cells := _cell_processes_of(run.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(cells) == 1, "the run never started its cell process"
        time.sleep(0.5)  # into the hanging cell
    finally:
        run.kill()  # the pytest process only, as an OOM kill would: not its process group
        run.wait(10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{cells[0]}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = Path(f"/proc/{cells[0]}").exists()
    if alive:
        os.kill(cells[0], signal.SIGKILL)
    assert not alive, "the hung cell process outlived the runner that owned it"
