"""Each lane's contract (harness/contracts/lanes.py) refuses a matrix the lane cannot run: one line
naming file, key and valid choices, exit status 2, nothing written. Checked here in-process for
every lane and mistake, through ``load_matrix`` and ``dflash-matrix cells``; that the refusal also
reaches the user from ``pytest --matrix`` and ``tox -e <lane>`` before any process or install is
shown end to end in test_entry_paths.py, once per lane.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from harness.cli import main
from harness.contracts.lanes import CONTRACTS
from harness.errors import EXIT_BAD_INPUT, InputError
from harness.matrix import load_matrix

from .lane_mistakes import CASES, IDS, expect_one_line, write_bad_matrix

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]

@pytest.mark.parametrize(("lane", "mistake", "axes", "options", "key", "problem"), CASES, ids=IDS)
def test_loading_the_matrix_refuses_it(tmp_path: Path, lane, mistake, axes, options, key, problem) -> None:
    with pytest.raises(InputError) as refused:
        load_matrix(write_bad_matrix(tmp_path, lane, axes, options))
    assert refused.value.key == key
    assert problem in refused.value.line()


@pytest.mark.parametrize(("lane", "mistake", "axes", "options", "key", "problem"), CASES, ids=IDS)
def test_dflash_matrix_cells_refuses_it(tmp_path, capsys, lane, mistake, axes, options, key, problem) -> None:
    path = write_bad_matrix(tmp_path, lane, axes, options)
    assert main(["cells", str(path)]) == EXIT_BAD_INPUT
    out, err = capsys.readouterr()
    assert out == ""
    expect_one_line(err, path, key, problem)


def test_every_option_carries_its_check_and_help() -> None:
    for contract in CONTRACTS.values():
        for declared in dataclasses.fields(contract.options):
            assert callable(declared.metadata.get("check")), (contract.name, declared.name)
            assert declared.metadata.get("help"), (contract.name, declared.name)
            # A default is what a matrix that leaves the option out runs with: written out in the
            # file, it must pass the option's own check unchanged (None stands for "not set").
            default = getattr(contract.options(), declared.name)
            if default is not None:
                written = list(default) if isinstance(default, tuple) else default
                assert declared.metadata["check"](written) == default, (contract.name, declared.name)


def test_shipped_matrices_are_accepted_by_their_lanes() -> None:
    for path in sorted((REPO / "matrices").glob("*.toml")):
        matrix = load_matrix(path)
        assert isinstance(matrix.lane_options, matrix.contract.options), path
