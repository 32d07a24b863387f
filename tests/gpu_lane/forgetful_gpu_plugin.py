"""A planted fault in harness.plugins.gpu, loaded with ``-p gpu_lane.forgetful_gpu_plugin`` in the
controller and every worker: DFLASH_TEST_FORGET=pin leaves every worker on all of the run's GPUs
(no worker is pinned to one), DFLASH_TEST_FORGET=deselect keeps the cells of other generations.
The entry-path checks must fail on each."""

from __future__ import annotations

import os

from harness.plugins import gpu

_FORGET = os.environ["DFLASH_TEST_FORGET"]
if _FORGET == "pin":
    gpu.device_for_worker = lambda worker_id, selectors: ",".join(selectors)
elif _FORGET == "deselect":
    gpu.split_generations = lambda items, capability: (list(items), [])
else:
    raise ValueError(f"DFLASH_TEST_FORGET={_FORGET!r}: not pin or deselect")
