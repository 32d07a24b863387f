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
    # What the engine does between building the models and serving: the block size over every
    # layer, the KV-cache layout every backend must support, the KV-cache groups and their
    # metadata builders. A deployment vLLM refuses here never serves a request.
    STARTUP = "startup"
    METADATA = "metadata"
    FORWARD = "forward"
    COMPARE = "compare"


STAGES: tuple[str, ...] = tuple(s.value for s in Stage)

# Called by a lane as it enters each stage, so that a cell whose process dies
# (segfault, abort, device assert) can still be reported with the stage it died in.
StageLog = Callable[[Stage], None]
