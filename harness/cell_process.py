"""What a cell process does to itself whatever its lane: keep its long-lived state out of the
garbage collector's reach.

A lane imports most of vLLM lazily (model, loader and backend modules: hundreds of thousands
of objects), and vLLM's model loader calls ``gc.collect()`` twice per model it builds; every
full collection walks each tracked object that is not frozen. Frozen, those passes walk only
what the build allocated (benchmarks/README.md has the figures). The runner freezes once the
first cell is done (``harness.runner.child``); a lane that sets up its per-process vLLM state
before its first model build freezes then as well. Only objects alive at a freeze and dropped
later can never be reclaimed.
"""

from __future__ import annotations

import gc


def freeze_process_state() -> None:
    gc.collect()
    gc.freeze()
