"""One matrix run in one process: plan the cells, run each through a cell process, judge it
against its expectation, journal it. ``run_matrix`` and the pytest plugin (one session per
xdist worker) both run their cells through a ``MatrixSession``.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness.contracts.machine import HOST_ISA
from harness.expectations import ExpectationSet, describe_release, describe_stale, expectations_for
from harness.journal import JournalWriter, now_iso
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.order import DEFAULT, CellOrder
from harness.releases.provenance import installed_vllm
from harness.result import CellResult, decide
from harness.runner import warm
from harness.runner.supervisor import CellRunner


def lane_groups_cells(matrix: Matrix) -> bool:
    """True when the matrix's cells need more than one kind of cell process (xdist loadgroup).

    A lane whose cells all share one key (the cpu lane) is served warm by any worker's cell
    process; grouping would put every cell on one worker and leave the others idle."""
    return len({matrix.process_key(cell) for cell in expand(matrix)}) > 1


def plan(matrix: Matrix, cell_ids: Iterable[str] | None = None, order: CellOrder = DEFAULT) -> tuple[Cell, ...]:
    """The cells to run, those of one process key together (each key's process starts once), in
    ``order`` (``harness.order``)."""
    cells = expand(matrix)
    if cell_ids is not None:
        wanted = set(cell_ids)
        unknown = wanted - {cell.id for cell in cells}
        if unknown:
            raise KeyError(f"no such cells in {matrix.path}: {sorted(unknown)}")
        cells = tuple(cell for cell in cells if cell.id in wanted)
    return order.arrange(cells, matrix.process_key)


class MatrixSession:
    """Runs, judges and journals cells of one matrix in this process.

    ``journal``: where each judged cell is written at once (None: nowhere); ``resumed``: cells a
    killed run already journaled, returned as they were instead of being run again.
    """

    def __init__(
        self,
        matrix: Matrix,
        expectations: ExpectationSet,
        plants: Sequence[str] = (),
        journal: JournalWriter | None = None,
        resumed: Mapping[str, CellResult] | None = None,
        shared_warm: warm.SharedWarmParent | None = None,
    ):
        self.matrix = matrix
        self.expectations = expectations
        self.journal = journal
        self.resumed = dict(resumed or {})
        self.runner = CellRunner(
            matrix,
            plants,
            on_environment=self._lane_environment,
            shared_warm=shared_warm,
        )

    def _lane_environment(self, environment: dict[str, Any]) -> None:
        """What a cell process's lane reports about its run. A lane whose host is the machine
        under test reports the host's ISA as vLLM sees it (``host_isa``, after any plant): the
        cells are judged by the rules that hold on that host."""
        if HOST_ISA in environment:
            self.expectations = self.expectations.for_host(str(environment[HOST_ISA]))
        if self.journal is not None:
            self.journal.env(environment)

    def start(self, planned: Sequence[str], **run: object) -> None:
        """Journal the run's header: what is planned, and ``run`` (who runs it, where)."""
        if self.journal is None:
            return
        self.journal.start(
            {
                "lane": self.matrix.lane,
                "matrix": self.matrix.name,
                **run,
                "started": now_iso(),
                "python": platform.python_version(),
                "host_platform": platform.platform(terse=True),
                "stale_expectations": describe_stale(self.expectations, expand(self.matrix)),
                "expectations_release": str(self.expectations.release) if self.expectations.release else None,
                "expectations_release_note": describe_release(self.expectations),
                "resumed": sorted(self.resumed),
            },
            planned,
        )

    def run(self, cell: Cell) -> tuple[CellResult, bool]:
        """The cell's result, and whether it was resumed from the journal rather than run."""
        if cell.id in self.resumed:
            return self.resumed[cell.id], True
        result = decide(cell, self.runner.run(cell), self.expectations.for_cell(cell))
        if self.journal is not None:
            self.journal.cell(result)
        return result, False

    def close(self) -> None:
        self.runner.close()
        if self.journal is not None:
            self.journal.end()
            self.journal.close()


def run_matrix(
    matrix: Matrix | str | Path,
    plants: Sequence[str] = (),
    cell_ids: Iterable[str] | None = None,
    options: dict[str, Any] | None = None,
    order: CellOrder = DEFAULT,
) -> list[CellResult]:
    """Run (some) cells of a matrix outside pytest and judge them: the API planted-fault tests use.

    ``options`` overrides keys of the matrix's [options] table (the cell processes get the matrix so). Cell
    processes fork from this process's shared warm parent: a test module's planted runs import
    the lane's preload once, not once each (a plant is applied in the cell process, after the fork).
    """
    if not isinstance(matrix, Matrix):
        matrix = load_matrix(matrix)
    if options:
        matrix = matrix.with_options(options)  # a bad override is refused here, before any cell process
    expectations = expectations_for(matrix, installed_vllm())
    session = MatrixSession(matrix, expectations, plants, shared_warm=warm.SHARED)
    try:
        return [session.run(cell)[0] for cell in plan(matrix, cell_ids, order)]
    finally:
        session.close()
