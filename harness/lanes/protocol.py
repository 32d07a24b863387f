"""The one interface every lane implements (cf. pytest-xdist's scheduler Protocol).

A lane turns a cell into an Observation. It never decides a verdict, never writes
reports and never imports another lane. One module per lane under ``harness.lanes``,
each exposing ``create(matrix) -> Lane``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from harness.matrix import Cell, Matrix
from harness.observation import Observation
from harness.stages import Stage

# Called by a lane as it enters each stage, so that a cell whose process dies
# (segfault, abort, device assert) can still be reported with the stage it died in.
StageLog = Callable[[Stage], None]


class StageTracker:
    """A StageLog that also remembers the last stage, for the Failure of an exception."""

    def __init__(self, stage_log: StageLog):
        self._log = stage_log
        self.current = Stage.CONFIG

    def __call__(self, stage: Stage) -> None:
        self.current = stage
        self._log(stage)


class Lane(Protocol):
    name: str

    def environment(self) -> Mapping[str, str]:
        """Run metadata: vllm/torch versions, platform, device, capability, ..."""
        ...

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        """Try one cell. Expected refusals are facts in the Observation; an exception
        escaping here is treated as a crash at the last stage logged."""
        ...


LaneFactory = Callable[[Matrix], Lane]
