"""A cell process stays cheap to reuse: one OpenMP thread unless the user says otherwise, what
survives its first cell frozen out of the collector's reach, an environment record of plain
strings, and cells that share one process key spread over every xdist worker."""

from __future__ import annotations

import dataclasses
import gc
import os
from pathlib import Path
from typing import Any

import pytest

from harness.matrix import expand, load_matrix
from harness.runner.session import lane_groups_cells, run_matrix
from harness.runner.supervisor import CellRunner

from .planted import cell_ids, write_fake_matrix

pytestmark = pytest.mark.process


def process_facts(lane: Any) -> None:
    """Plant: each cell's details say what its process looked like when the cell ended."""
    observe = lane.observe

    def observed(cell: Any, stage_log: Any) -> Any:
        observation = observe(cell, stage_log)
        facts = {"omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "frozen": gc.get_freeze_count()}
        return dataclasses.replace(observation, details={**observation.details, **facts})

    lane.observe = observed


class Version(str):
    """A str subclass from a module the runner would have to import, like torch.__version__."""


def versioned_environment(lane: Any) -> None:
    lane.environment = lambda: {"library": Version("1.2.3")}


FACTS = f"{__name__}:process_facts"


def test_cell_process_runs_one_openmp_thread_and_freezes_what_its_first_cell_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    results = run_matrix(write_fake_matrix(tmp_path, "warm", ["A_ATTN"]), plants=[FACTS])

    assert [r.id for r in results] == cell_ids(["A_ATTN"])
    assert {r.details["omp_num_threads"] for r in results} == {"1"}
    assert len({r.details["pid"] for r in results}) == 1
    assert results[0].details["frozen"] == 0, "the first cell runs before anything is frozen"
    assert all(r.details["frozen"] > 0 for r in results[1:])


def test_thread_count_the_user_set_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    results = run_matrix(write_fake_matrix(tmp_path, "threads", ["A_ATTN"]), plants=[FACTS])

    assert {r.details["omp_num_threads"] for r in results} == {"3"}


def test_environment_reaches_the_runner_as_plain_strings(tmp_path: Path) -> None:
    seen: list[dict[str, Any]] = []
    matrix = load_matrix(write_fake_matrix(tmp_path, "env", ["A_ATTN"]))
    runner = CellRunner(matrix, plants=[f"{__name__}:versioned_environment"], on_environment=seen.append)
    try:
        runner.run(expand(matrix)[0])
    finally:
        runner.close()

    assert seen == [{"library": "1.2.3"}]
    assert type(seen[0]["library"]) is str


def test_only_cells_that_need_different_processes_are_grouped_on_workers(tmp_path: Path) -> None:
    one_key = load_matrix(write_fake_matrix(tmp_path, "one", ["A_ATTN", "B_ATTN"]))
    two_keys = load_matrix(write_fake_matrix(tmp_path, "two", ["A_ATTN"], capabilities=["8.0", "9.0"]))
    one_capability = load_matrix(write_fake_matrix(tmp_path, "single", ["A_ATTN"], capabilities=["9.0"]))

    assert not lane_groups_cells(one_key), "one warm process serves every cell: spread them over the workers"
    assert not lane_groups_cells(one_capability)
    assert lane_groups_cells(two_keys)
