"""The pytest adapter: matrix cells become test items. The only module that knows pytest.

    pytest --matrix matrices/cpu.toml --report-dir reports/cpu [-n 2] [--resume]

Each cell item runs in the lane's cell process (harness.runner), is judged against its
expectation, is journaled at once, and passes when the verdict is the expected one.
Reports are rebuilt from the journal when the session ends (by the xdist controller).
"""

from __future__ import annotations

import os
import platform
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.bundled import matrix_path
from harness.errors import EXIT_BAD_INPUT, InputError
from harness.expectations import ExpectationSet, describe_release, describe_stale, expectations_for
from harness.journal import JOURNAL_SUFFIX, JournalWriter, now_iso, read_journals
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.result import CellResult, decide
from harness.runner import CellRunner, lane_groups_cells
from harness.vllm_release import installed_vllm

JOURNAL_DIR = "journal"
REPORT_FILES = ("junit.xml", "matrix.json", "matrix.md", "matrix.html")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dflash-matrix", "DFlash compatibility matrix")
    group.addoption("--matrix", metavar="PATH", help="matrix file, or a shipped matrix by name")
    group.addoption("--report-dir", metavar="DIR", help="journal and reports go here (default: reports/<matrix name>)")
    group.addoption("--resume", action="store_true", help="keep the journal and skip cells it already holds")
    group.addoption(
        "--plant",
        action="append",
        default=[],
        metavar="MODULE:FUNCTION",
        help="call FUNCTION(lane) in each cell process before its first cell (planted-fault runs)",
    )


class MatrixRun:
    """Per-process state of a matrix run: the matrix, its expectations, journal and runner."""

    def __init__(self, config: pytest.Config, matrix: Matrix, expectations: ExpectationSet, report_dir: Path):
        self.config = config
        self.matrix = matrix
        self.expectations = expectations
        self.report_dir = report_dir
        self.journal_dir = report_dir / JOURNAL_DIR
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.resumed: dict[str, CellResult] = {}
        self.journal: JournalWriter | None = None
        self.runner: CellRunner | None = None

    @property
    def is_controller(self) -> bool:
        return not hasattr(self.config, "workerinput")

    def start(self, planned: list[str]) -> None:
        journaled = self.journal_dir.exists() and any(self.journal_dir.glob(f"*{JOURNAL_SUFFIX}"))
        if self.config.getoption("resume") and journaled:
            self.resumed = {cell.id: cell for cell in read_journals([self.journal_dir]).cells}
        self.journal = JournalWriter(self.journal_dir / f"{self.worker}{JOURNAL_SUFFIX}")
        self.journal.start(
            {
                "lane": self.matrix.lane,
                "matrix": self.matrix.name,
                "matrix_path": _relative(self.matrix.path),
                "worker": self.worker,
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
        self.runner = CellRunner(self.matrix, plants=self.config.getoption("plant"), on_environment=self.journal.env)

    def run(self, cell: Cell) -> tuple[CellResult, bool]:
        if cell.id in self.resumed:
            return self.resumed[cell.id], True
        assert self.runner is not None and self.journal is not None
        result = decide(cell, self.runner.run(cell), self.expectations.for_cell(cell))
        self.journal.cell(result)
        return result, False

    def finish(self) -> None:
        if self.runner is not None:
            self.runner.close()
        if self.journal is not None:
            self.journal.end()
            self.journal.close()


_RUN = pytest.StashKey[MatrixRun]()


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("matrix")
    if not path:
        return
    try:
        matrix = load_matrix(matrix_path(path))
        expectations = expectations_for(matrix, installed_vllm())
    except InputError as error:
        pytest.exit(f"dflash-matrix: {error.line()}", returncode=EXIT_BAD_INPUT)
    report_dir = Path(config.getoption("report_dir") or Path("reports") / matrix.name)
    run = MatrixRun(config, matrix, expectations, report_dir)
    config.stash[_RUN] = run
    if run.is_controller and not config.getoption("resume"):
        # A new run supersedes the last one here: its journal and reports would mislabel this run.
        shutil.rmtree(run.journal_dir, ignore_errors=True)
        for name in REPORT_FILES:
            (report_dir / name).unlink(missing_ok=True)
    if str(matrix.path) not in config.args:
        config.args.append(str(matrix.path))


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    run = parent.config.stash.get(_RUN, None)
    if run is not None and file_path.resolve() == run.matrix.path.resolve():
        collector: pytest.Collector = MatrixFile.from_parent(parent, path=file_path)
        return collector
    return None


class MatrixFile(pytest.File):
    def collect(self) -> Iterator[pytest.Item]:
        run = self.config.stash[_RUN]
        group = lane_groups_cells(run.matrix)
        cells = expand(run.matrix)
        for cell in sorted(cells, key=run.matrix.process_key):
            item = CellItem.from_parent(self, name=cell.id, cell=cell)
            if group:
                # Keep cells of one process key on one xdist worker: its cell process stays warm.
                item.add_marker(pytest.mark.xdist_group(name=run.matrix.process_key(cell)))
            yield item
        stale = describe_stale(run.expectations, cells)
        yield StaleExpectationsItem.from_parent(self, name="expectations-stale", stale=stale)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadgroup` keeps the cells of one process key on one xdist worker, so each key's
    cell process (a vLLM import, seconds) starts once. xdist groups by suffixing node ids in the
    workers, which pytest 9.2 no longer honours (pytest-dev/pytest-xdist#1386): the cells were
    spread silently. The controller knows every cell's key from the matrix, so it groups them."""
    run = config.stash.get(_RUN, None)
    if run is None or config.getvalue("dist") != "loadgroup" or not lane_groups_cells(run.matrix):
        return None
    from xdist.scheduler import LoadGroupScheduling

    keys = {cell.id: run.matrix.process_key(cell) for cell in expand(run.matrix)}

    class ProcessKeyScheduling(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            cell_id = nodeid.rpartition("::")[2].partition("@")[0]
            key = keys.get(cell_id)
            return f"dflash-process-key:{key}" if key is not None else str(super()._split_scope(nodeid))

    return ProcessKeyScheduling(config, log)


class CellMismatch(Exception):
    def __init__(self, result: CellResult):
        super().__init__(result.id)
        self.result = result


class CellItem(pytest.Item):
    def __init__(self, *, cell: Cell, **kwargs: Any):
        super().__init__(**kwargs)
        self.cell = cell
        for axis, value in cell.axes:
            self.user_properties.append((axis, value))

    def runtest(self) -> None:
        result, resumed = self.config.stash[_RUN].run(self.cell)
        self.user_properties.extend([("verdict", result.verdict.value), ("expected", result.expected.value)])
        if resumed:
            self.user_properties.append(("resumed", "true"))
        if not result.ok:
            raise CellMismatch(result)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, CellMismatch):
            r = excinfo.value.result
            stage = f" at stage {r.stage.value}" if r.stage else ""
            lines = [
                f"{r.outcome.value}: expected {r.expected.value}, observed {r.verdict.value}{stage}",
                f"  message:  {r.message}",
                f"  expected: {r.expected_reason}",
            ]
            if r.expected_message:
                lines.append(f"  expected message to contain: {r.expected_message!r}")
            if r.observed_backends:
                lines.append(f"  draft layers: {', '.join(r.observed_backends)}")
            return "\n".join(lines)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"cell {self.cell.id}"


class StaleExpectationsItem(pytest.Item):
    def __init__(self, *, stale: list[str], **kwargs: Any):
        super().__init__(**kwargs)
        self.stale = stale

    def runtest(self) -> None:
        if self.stale:
            raise AssertionError("stale expectation rules (they decide no cell):\n" + "\n".join(self.stale))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, "expectations: stale rules"


def pytest_collection_finish(session: pytest.Session) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is not None:
        run.start([item.cell.id for item in session.items if isinstance(item, CellItem)])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = session.config.stash.get(_RUN, None)
    if run is None:
        return
    run.finish()
    if run.is_controller and run.journal_dir.exists():
        from harness.reports.build import write_reports

        try:
            write_reports(read_journals([run.journal_dir]), run.report_dir)
        except InputError as error:
            # The journal stands; `dflash-matrix report` can rebuild once the cause is fixed.
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            sys.stderr.write(f"dflash-matrix: cannot build reports: {error.line()}\n")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    run = config.stash.get(_RUN, None)
    if run is None or not run.is_controller:
        return
    terminalreporter.write_sep("-", f"dflash-matrix: {run.matrix.name} ({run.matrix.lane} lane)")
    terminalreporter.write_line(f"journal: {_relative(run.journal_dir)}   reports: {_relative(run.report_dir)}")


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
