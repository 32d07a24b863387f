"""The stages a cell passes through, and the callback a lane reports them with.

Below both ``observation`` (a Failure names the stage it happened in) and ``verdict`` (a
Judgement names the stage a verdict was decided at): both import it, neither imports the other
for it.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum


class Stage(StrEnum):
    CONFIG = "config"
    SELECT = "select"
    BUILD = "build"
    METADATA = "metadata"
    FORWARD = "forward"
    COMPARE = "compare"


STAGES: tuple[str, ...] = tuple(s.value for s in Stage)

# Called by a lane as it enters each stage, so that a cell whose process dies
# (segfault, abort, device assert) can still be reported with the stage it died in.
StageLog = Callable[[Stage], None]
