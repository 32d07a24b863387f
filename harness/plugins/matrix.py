"""The pytest adapter: matrix cells become test items. The only module that knows pytest.

    pytest --matrix matrices/cpu.toml --report-dir reports/cpu [-n 2] [--resume]

Each cell item runs in the lane's cell process through this process's MatrixSession
(harness.runner.session), is judged against its expectation, is journaled at once, and passes
when the verdict is the expected one.
Reports are rebuilt from the journal when the session ends (by the xdist controller).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.bundled import matrix_path
from harness.errors import EXIT_BAD_INPUT, InputError
from harness.expectations import ExpectationSet, describe_stale, expectations_for, lane_fingerprint
from harness.journal import JOURNAL_SUFFIX, JournalWriter, read_journals
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.order import CHOICES as ORDER_CHOICES
from harness.order import CellOrder, parse_order
from harness.releases.provenance import installed_vllm
from harness.result import CellResult
from harness.runner.session import MatrixSession, lane_groups_cells

JOURNAL_DIR = "journal"


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
    group.addoption(
        "--order",
        default="default",
        metavar="ORDER",
        help=f"the order cells run in: {', '.join(ORDER_CHOICES)} (a verdict must not depend on it)",
    )


class MatrixPlugin:
    """A ``--matrix`` run, registered as a plugin object by ``pytest_configure`` (as pytest's own
    junitxml registers ``LogXML``): its hooks exist only while a matrix runs, and hold its state.

    Every process (the xdist controller and each worker) has one; the processes that collect
    cells run them through a ``MatrixSession`` of their own, journaled under the worker's name.
    """

    name = "dflash-matrix-run"

    def __init__(
        self, config: pytest.Config, matrix: Matrix, expectations: ExpectationSet, report_dir: Path, order: CellOrder
    ):
        self.config = config
        self.matrix = matrix
        self.expectations = expectations
        self.order = order
        self.report_dir = report_dir
        self.journal_dir = report_dir / JOURNAL_DIR
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        self.session: MatrixSession | None = None

    @property
    def is_controller(self) -> bool:
        return not hasattr(self.config, "workerinput")

    def run(self, cell: Cell) -> tuple[CellResult, bool]:
        assert self.session is not None, "cells run only after collection finished"
        return self.session.run(cell)

    # -- hooks -----------------------------------------------------------
    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
        if file_path.resolve() == self.matrix.path.resolve():
            collector: pytest.Collector = MatrixFile.from_parent(parent, path=file_path, plugin=self)
            return collector
        return None

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        """`--dist loadgroup` keeps the cells of one process key on one xdist worker, so each key's
        cell process (a vLLM import, seconds) starts once. xdist groups by suffixing node ids in the
        workers, which pytest 9.2 no longer honours (pytest-dev/pytest-xdist#1386): the cells were
        spread silently. The controller knows every cell's key from the matrix, so it groups them.

        Only when the cells collected need more than one key: a run left with one (a gpu_emulated
        run of one generation, the others deselected by harness.plugins.gpu) would otherwise put
        every cell on one worker and leave the others idle."""
        if config.getvalue("dist") != "loadgroup" or not lane_groups_cells(self.matrix):
            return None
        from xdist.scheduler import LoadGroupScheduling

        keys = {cell.id: self.matrix.process_key(cell) for cell in expand(self.matrix)}

        def key_of(nodeid: str) -> str | None:
            return keys.get(nodeid.rpartition("::")[2].partition("@")[0])

        class ProcessKeyScheduling(LoadGroupScheduling):
            collected_keys: set[str] | None = None

            def _split_scope(self, nodeid: str) -> str:
                key = key_of(nodeid)
                if key is None:
                    return str(super()._split_scope(nodeid))
                if self.collected_keys is None:  # the collection is complete when scopes are split
                    self.collected_keys = {k for k in map(key_of, self.collection or ()) if k is not None}
                return f"dflash-process-key:{key}" if len(self.collected_keys) > 1 else nodeid

        return ProcessKeyScheduling(config, log)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        journaled = self.journal_dir.exists() and any(self.journal_dir.glob(f"*{JOURNAL_SUFFIX}"))
        resumed = {}
        if self.config.getoption("resume") and journaled:
            resumed = {cell.id: cell for cell in read_journals([self.journal_dir]).cells}
        self.session = MatrixSession(
            self.matrix,
            self.expectations,
            plants=self.config.getoption("plant"),
            journal=JournalWriter(self.journal_dir / f"{self.worker}{JOURNAL_SUFFIX}"),
            resumed=resumed,
        )
        planned = [item.cell.id for item in session.items if isinstance(item, CellItem)]
        self.session.start(
            planned,
            matrix_path=_relative(self.matrix.path),
            worker=self.worker,
            order=str(self.order),
            # What the lane's verdicts were built from: `expectations measured` takes a report as a
            # release's measurement only with today's (harness.expectations.lane_fingerprint).
            build_fingerprint=lane_fingerprint(self.matrix),
        )

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.session is not None:
            self.session.close()
        if self.is_controller and self.journal_dir.exists():
            from harness.reports.build import write_reports

            try:
                write_reports(read_journals([self.journal_dir]), self.report_dir)
            except InputError as error:
                # The journal stands; `dflash-matrix report` can rebuild once the cause is fixed.
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
                sys.stderr.write(f"dflash-matrix: cannot build reports: {error.line()}\n")

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if not self.is_controller:
            return
        terminalreporter.write_sep("-", f"dflash-matrix: {self.matrix.name} ({self.matrix.lane} lane)")
        terminalreporter.write_line(f"journal: {_relative(self.journal_dir)}   reports: {_relative(self.report_dir)}")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("matrix")
    if not path:
        return
    try:
        matrix = load_matrix(matrix_path(path))
        _require_lane_plugins(config, matrix)
        expectations = expectations_for(matrix, installed_vllm())
        order = parse_order(config.getoption("order"))
    except InputError as error:
        pytest.exit(f"dflash-matrix: {error.line()}", returncode=EXIT_BAD_INPUT)
    report_dir = Path(config.getoption("report_dir") or Path("reports") / matrix.name)
    plugin = MatrixPlugin(config, matrix, expectations, report_dir, order)
    config.pluginmanager.register(plugin, MatrixPlugin.name)
    if plugin.is_controller and not config.getoption("resume"):
        # The controller writes the reports at the end anyway; workers never load that code.
        from harness.reports.build import REPORT_FILES

        # A new run supersedes the last one here: its journal and reports would mislabel this run.
        shutil.rmtree(plugin.journal_dir, ignore_errors=True)
        for name in REPORT_FILES:
            (report_dir / name).unlink(missing_ok=True)
    if str(matrix.path) not in config.args:
        config.args.append(str(matrix.path))


def _require_lane_plugins(config: pytest.Config, matrix: Matrix) -> None:
    """A gpu matrix run without the gpu plugin would run every generation's cells on GPU 0 and
    report the others' as regressions: refuse it, naming the one entry path that loads it."""
    missing = [plugin for plugin in matrix.contract.plugins if not config.pluginmanager.has_plugin(plugin)]
    if missing:
        raise InputError(
            matrix.path,
            "matrix.lane",
            f"the {matrix.lane} lane runs under the pytest plugin {', '.join(missing)}: run it with "
            f"`dflash-matrix run {matrix.path}`, which loads it (or pass {' '.join(f'-p {p}' for p in missing)})",
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    plugin = config.pluginmanager.get_plugin(MatrixPlugin.name)
    if plugin is not None:
        config.pluginmanager.unregister(plugin)


class MatrixFile(pytest.File):
    def __init__(self, *, plugin: MatrixPlugin, **kwargs: Any):
        super().__init__(**kwargs)
        self.plugin = plugin

    def collect(self) -> Iterator[pytest.Item]:
        matrix = self.plugin.matrix
        group = lane_groups_cells(matrix)
        cells = expand(matrix)
        for cell in self.plugin.order.arrange(cells, matrix.process_key):
            item = CellItem.from_parent(self, name=cell.id, cell=cell, plugin=self.plugin)
            if group:
                # Keep cells of one process key on one xdist worker: its cell process stays warm.
                item.add_marker(pytest.mark.xdist_group(name=matrix.process_key(cell)))
            yield item
        stale = describe_stale(self.plugin.expectations, cells)
        yield StaleExpectationsItem.from_parent(self, name="expectations-stale", stale=stale)


class CellMismatch(Exception):
    def __init__(self, result: CellResult):
        super().__init__(result.id)
        self.result = result


class CellItem(pytest.Item):
    def __init__(self, *, cell: Cell, plugin: MatrixPlugin, **kwargs: Any):
        super().__init__(**kwargs)
        self.cell = cell
        self.plugin = plugin
        for axis, value in cell.axes:
            self.user_properties.append((axis, value))

    def runtest(self) -> None:
        result, resumed = self.plugin.run(self.cell)
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


def _relative(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)
