"""A hung cell becomes `timeout` and costs nothing else; a dead cell process is replaced."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from harness.matrix import expand, load_matrix
from harness.runner import supervisor
from harness.runner.session import run_matrix
from harness.runner.supervisor import CellRunner
from harness.stages import Stage
from harness.verdict import Verdict

from .planted import cell_ids, write_fake_matrix

pytestmark = pytest.mark.process

CELLS = cell_ids(["A_ATTN"])


def test_hung_cell_times_out_and_the_next_cells_run_in_a_new_process(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "hang", ["A_ATTN"], {"A_ATTN-causal-nosink": "hang"}, timeout_s=1)

    results = run_matrix(path)

    assert [r.id for r in results] == CELLS
    assert [r.verdict for r in results] == [Verdict.PASS, Verdict.TIMEOUT, Verdict.PASS, Verdict.PASS]
    hung = results[1]
    assert hung.stage == Stage.FORWARD
    assert hung.message == "no result after 1 s during stage forward"
    assert hung.details["exitcode"] == -signal.SIGKILL
    assert 1.0 <= hung.duration_s < 10
    before, after, last = (results[i].details["pid"] for i in (0, 2, 3))
    assert before != after, "the hung process must have been replaced"
    assert after == last, "the replacement stays warm for the cells after it"


def test_process_that_died_between_cells_is_replaced_without_blaming_the_next_cell(tmp_path: Path) -> None:
    matrix = load_matrix(write_fake_matrix(tmp_path, "idle", ["A_ATTN"]))
    cells = expand(matrix)
    runner = CellRunner(matrix)
    try:
        first = runner.run(cells[0])
        assert first.failure is None
        # What the OOM killer or a runtime's watchdog does to a warm, idle cell process.
        os.kill(first.details["pid"], signal.SIGKILL)
        time.sleep(0.2)
        second = runner.run(cells[1])
        third = runner.run(cells[2])
    finally:
        runner.close()
    assert second.failure is None and not second.timed_out
    assert second.details["pid"] != first.details["pid"]
    assert third.details["pid"] == second.details["pid"]


def test_lane_that_cannot_start_fails_every_cell_at_config_with_the_reason(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "broken", ["A_ATTN"])

    results = run_matrix(path, plants=[f"{__package__}.planted:fail_to_start"])

    assert [r.id for r in results] == CELLS
    assert {r.verdict for r in results} == {Verdict.CRASH}
    assert {r.stage for r in results} == {Stage.CONFIG}
    assert all("RuntimeError: planted: this lane cannot start here" in r.message for r in results)


def test_poisoned_process_is_retired_after_its_cell(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "poison", ["A_ATTN"], {"A_ATTN-causal-nosink": "poison"})

    results = run_matrix(path)

    assert [r.verdict for r in results] == [Verdict.PASS] * 4
    pids = [r.details["pid"] for r in results]
    assert pids[0] == pids[1] != pids[2] == pids[3]


def test_plants_are_applied_again_in_every_replacement_process(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "plant", ["A_ATTN", "B_ATTN"])

    results = run_matrix(path, plants=[f"{__package__}.planted:abort_sinks_in_forward"])

    assert [r.id for r in results] == cell_ids(["A_ATTN", "B_ATTN"])
    for result in results:
        if result.axes["sink"]:
            assert (result.verdict, result.stage) == (Verdict.CRASH, Stage.FORWARD), result.id
            assert result.message == "ProcessDied: cell process killed by SIGABRT during stage forward"
        else:
            assert result.verdict == Verdict.PASS, result.id


def test_lane_that_never_starts_fails_every_cell_once_without_waiting_per_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervisor, "STARTUP_TIMEOUT_S", 1.0)
    path = write_fake_matrix(tmp_path, "stuck", ["A_ATTN"])

    began = time.monotonic()
    results = run_matrix(path, plants=[f"{__package__}.planted:hang_at_startup"])

    assert time.monotonic() - began < 10, "one startup time limit for the process key, not one per cell"
    assert [r.id for r in results] == CELLS
    assert {(r.verdict, r.stage, r.message) for r in results} == {
        (Verdict.CRASH, Stage.CONFIG, "LaneStartup: lane did not start within 1 s")
    }


def test_observation_that_cannot_cross_the_process_boundary_is_that_cells_crash_only(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "unsendable", ["A_ATTN"])

    results = run_matrix(path, plants=[f"{__package__}.planted:unsendable_details"])

    assert [r.id for r in results] == CELLS
    unsendable = (
        "UnsendableObservation: cannot send the observation to the runner: AttributeError: "
        "Can't pickle local object 'unsendable_details.<locals>.planted.<locals>.<lambda>'"
    )
    unreadable = (
        "UnreadableObservation: cannot read the cell's observation: "
        "ImportError: planted: this object only exists in the cell process"
    )
    assert [(r.verdict, r.stage, r.message) for r in results] == [
        (Verdict.CRASH, Stage.COMPARE, unsendable),
        (Verdict.CRASH, Stage.COMPARE, unreadable),
        (Verdict.CRASH, Stage.COMPARE, unsendable),
        (Verdict.PASS, None, "A_ATTN, A_ATTN: max abs error 0 <= 0.001"),
    ]
