"""Run a lane's matrix here, in the env you already have, with the same reports as tox.

    dflash-matrix run selection [--report-dir DIR] [-n 2] [--resume] [--order ORDER] [-- PYTEST ARGS]

LANE_OR_MATRIX is a shipped matrix (cpu, selection, gpu, ...) or a matrix file. The run is a
pytest session of the dflash-matrix plugin, and of the plugins the lane's contract names (the
gpu lanes': harness.plugins.gpu), over that matrix alone (no project tests, no pytest
configuration of the current folder), judged against the expectations of the vLLM installed
here. tox's gpu and gpu-emulated envs run this command. The selection lane's stub libcuda.so.1
is built first where needed (gcc).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import sys
from pathlib import Path

from harness.bundled import matrix_path, shipped_matrices
from harness.errors import InputError
from harness.matrix import Matrix, load_matrix
from harness.order import CHOICES as ORDER_CHOICES
from harness.order import parse_order

PLUGIN = "harness.plugins.matrix"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", metavar="LANE_OR_MATRIX", help=f"one of {', '.join(shipped_matrices())} or a file")
    parser.add_argument("--report-dir", metavar="DIR", help="journal and reports (default: reports/<matrix name>)")
    parser.add_argument("-n", "--workers", type=int, default=0, metavar="N", help="pytest-xdist workers (default 0)")
    parser.add_argument("--resume", action="store_true", help="keep the journal and skip cells it already holds")
    parser.add_argument(
        "--order",
        default="default",
        metavar="ORDER",
        help=f"the order cells run in: {', '.join(ORDER_CHOICES)}; every cell's verdict must be the same in each",
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="after --: passed to pytest (-k, -x, ...)")


def pytest_arguments(args: argparse.Namespace, matrix: Matrix, report_dir: Path) -> list[str]:
    arguments = [
        # No ini file and no cache: the current folder may be a vLLM checkout with its own pytest setup.
        "-c",
        os.devnull,
        "--rootdir",
        str(Path.cwd()),
        "-p",
        "no:cacheprovider",
        "--matrix",
        str(matrix.path),
        "--report-dir",
        str(report_dir),
        # The matrix as the only path to collect: without one pytest would collect the current folder.
        str(matrix.path),
    ]
    for plugin in reversed(matrix.contract.plugins):
        arguments[:0] = ["-p", plugin]
    registered = {entry.value for entry in importlib.metadata.entry_points(group="pytest11")}
    if PLUGIN not in registered:  # a source checkout on PYTHONPATH: no entry point to load it
        arguments[:0] = ["-p", PLUGIN]
    if args.workers:
        if importlib.util.find_spec("xdist") is None:
            raise InputError("-n", "", "pytest-xdist is not installed here; run with -n 0 or pip install pytest-xdist")
        arguments += ["-n", str(args.workers), "--dist", "loadgroup"]
    if args.resume:
        arguments.append("--resume")
    arguments += ["--order", str(parse_order(args.order))]
    # REMAINDER also takes run's own options given after the matrix (--report-dir is pytest's too).
    return arguments + [argument for argument in args.pytest_args if argument != "--"]


def run(args: argparse.Namespace) -> int:
    parse_order(args.order)  # a bad order is one line before anything runs
    path = matrix_path(args.matrix)
    if not path.exists():
        raise InputError(args.matrix, "", "is neither a matrix file nor a shipped matrix", shipped_matrices())
    matrix = load_matrix(path)
    if matrix.lane == "selection":
        from harness.cuda.stub_driver import StubBuildError, build_stub

        try:
            import ctypes

            ctypes.CDLL("libcuda.so.1")
        except OSError:
            try:
                build_stub()
            except StubBuildError as error:
                raise InputError("selection lane", "", str(error)) from None
    report_dir = Path(args.report_dir or Path("reports") / matrix.name)
    import pytest

    status = int(pytest.main(pytest_arguments(args, matrix, report_dir)))
    sys.stdout.flush()
    return status
