"""The one interface every lane implements (cf. pytest-xdist's scheduler Protocol).

A lane turns a cell into an Observation and nothing else. It never decides a verdict, never
writes reports, never imports another lane or the runner. Exceptions, timing and stage
bookkeeping belong to the runner (``harness.runner.child``): an exception escaping ``observe``
is a crash at the last stage the lane logged. One module (or package) per lane under
``harness.lanes``, each exposing ``create(matrix) -> Lane``; what a lane can run is declared
apart, as data (``harness.contracts.lanes``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from harness.matrix import Cell, Matrix
from harness.observation import Observation
from harness.stages import Stage, StageLog


class Lane(Protocol):
    name: str

    def environment(self) -> Mapping[str, str]:
        """Run metadata: vllm/torch versions, platform, device, capability, ..."""
        ...

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        """Try one cell. Expected refusals are facts in the Observation; an exception
        escaping here is treated as a crash at the last stage logged."""
        ...


@dataclass(frozen=True)
class Aftermath:
    """What an exception that escaped ``observe`` means, in the lane's own knowledge: the stage
    it belongs to, and why (if at all) the process must not serve another cell."""

    stage: Stage
    retire_process: str | None = None


class AssessesFailures(Protocol):
    """Optional for a lane: the runner asks it about each exception that escapes ``observe``."""

    def assess_failure(self, cell: Cell, stage: Stage, error: Exception) -> Aftermath: ...


LaneFactory = Callable[[Matrix], Lane]
