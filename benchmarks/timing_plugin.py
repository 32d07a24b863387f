"""pytest plugin for benchmark runs of the matrix plugin (``-p benchmarks.timing_plugin``).

``--bench-cells FILE`` keeps only the cell items named in FILE (one id a line), so a
benchmark times exactly the cells it chose; ``--bench-times FILE`` receives each kept
item's wall time (setup + call + teardown, as the xdist controller or the single process
sees it) as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dflash-matrix benchmarks")
    group.addoption("--bench-cells", metavar="FILE", help="run only the cells named in FILE")
    group.addoption("--bench-times", metavar="FILE", help="write each cell item's wall time here (JSON)")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(ItemClock(config), "dflash-bench-clock")


class ItemClock:
    def __init__(self, config: pytest.Config):
        self.config = config
        self.seconds: dict[str, float] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        listing = self.config.getoption("bench_cells")
        if not listing:
            return
        wanted = set(Path(listing).read_text().split())
        missing = wanted - {item.name for item in items}
        if missing:
            raise pytest.UsageError(f"--bench-cells: no such cells: {', '.join(sorted(missing))}")
        self.config.hook.pytest_deselected(items=[item for item in items if item.name not in wanted])
        items[:] = [item for item in items if item.name in wanted]

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration

    def pytest_sessionfinish(self) -> None:
        target = self.config.getoption("bench_times")
        if target and not hasattr(self.config, "workerinput"):
            named = {nodeid.rpartition("::")[2]: seconds for nodeid, seconds in self.seconds.items()}
            Path(target).write_text(json.dumps(named, indent=1, sort_keys=True))
