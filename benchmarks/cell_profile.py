"""A plant for benchmark runs: cProfile around every cell but the first, in the cell process.

``--plant benchmarks.cell_profile:install`` with ``DFLASH_BENCH_PROFILE=<file>`` in the
environment (the cell process inherits it). The first cell is left out: it pays for the
process's imports and set-up, which the benchmark reports as start-up. The statistics
are written after every cell, because a cell process ends without running exit hooks.
"""

from __future__ import annotations

import cProfile
import functools
import os
from typing import Any

PROFILE_ENV = "DFLASH_BENCH_PROFILE"


def install(lane: Any) -> None:
    target = os.environ[PROFILE_ENV]
    profiler = cProfile.Profile()
    observe = lane.observe
    seen = 0

    @functools.wraps(observe)
    def observe_profiled(cell: Any, stage_log: Any) -> Any:
        nonlocal seen
        seen += 1
        if seen == 1:
            return observe(cell, stage_log)
        profiler.enable()
        try:
            return observe(cell, stage_log)
        finally:
            profiler.disable()
            profiler.dump_stats(target)

    lane.observe = observe_profiled
