"""Two runs of one matrix give identical verdicts and messages; each cell's seed is fixed by its id."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.matrix import expand, load_matrix
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from .planted import cell_ids, inner_env, write_fake_matrix

pytestmark = pytest.mark.process

BACKENDS = ["A_ATTN", "B_ATTN", "C_ATTN", "D_ATTN"]  # D_ATTN: nothing planted, it passes
# One cell of every fault the fake lane can plant.
PLANTED = {
    "A_ATTN-causal-sink": "abort",
    "A_ATTN-causal-nosink": "segfault",
    "A_ATTN-noncausal-sink": "exit",
    "A_ATTN-noncausal-nosink": "hang",
    "B_ATTN-causal-sink": "raise",
    "B_ATTN-causal-nosink": "mismatch",
    "B_ATTN-noncausal-sink": "reject",
    "B_ATTN-noncausal-nosink": "substitute",
    "C_ATTN-causal-sink": "lose-request",
    "C_ATTN-causal-nosink": "unavailable",
    "C_ATTN-noncausal-sink": "loader-diff",
    "C_ATTN-noncausal-nosink": "lose-setting",
}


def test_two_runs_give_identical_verdicts_and_messages(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "twice", BACKENDS, PLANTED, timeout_s=1)

    runs = [run_matrix(path) for _ in range(2)]

    first, second = (
        [(r.id, r.verdict, r.stage, r.message, r.observed_backends, r.max_abs_err, r.outcome) for r in run]
        for run in runs
    )
    assert first == second
    assert [row[0] for row in first] == cell_ids(BACKENDS)
    assert {row[1] for row in first} == set(Verdict), "every verdict is covered"


def _seeds_in_a_fresh_interpreter(matrix: Path, hash_seed: str) -> dict[str, int]:
    program = (
        "import json, sys\nfrom harness.matrix import expand, load_matrix\n"
        "print(json.dumps({c.id: c.seed for c in expand(load_matrix(sys.argv[1]))}))"
    )
    env = {**inner_env(), "PYTHONHASHSEED": hash_seed}
    run = subprocess.run(
        [sys.executable, "-c", program, str(matrix)], capture_output=True, text=True, env=env, timeout=60, check=True
    )
    seeds: dict[str, int] = json.loads(run.stdout)
    return seeds


def test_cell_seed_is_derived_from_the_id_and_stable(tmp_path: Path) -> None:
    matrix = load_matrix(write_fake_matrix(tmp_path, "seeds", BACKENDS))
    wider = load_matrix(write_fake_matrix(tmp_path, "wider", ["Z_ATTN", *BACKENDS, "E_ATTN"]))
    seeds = {cell.id: cell.seed for cell in expand(matrix)}

    # Pinned: a changed derivation would silently change every tensor the lanes draw.
    assert seeds["A_ATTN-causal-sink"] == 4220931482
    assert len(set(seeds.values())) == len(seeds), "every cell draws its own tensors"
    assert all(0 <= seed < 2**32 for seed in seeds.values())
    # An unrelated axis value added elsewhere changes neither ids nor seeds.
    assert {cell.id: cell.seed for cell in expand(wider) if cell.id in seeds} == seeds
    # Not Python's salted hash(): the same in interpreters with different hash seeds.
    path = tmp_path / "seeds.toml"
    assert _seeds_in_a_fresh_interpreter(path, "1") == _seeds_in_a_fresh_interpreter(path, "2") == seeds
