"""The Model Runner V2 DFlash loader as it was before vLLM PR #46770, planted into a cell process.

The fix added one argument to the draft config's ``replace(...)``:
``backend=speculative_config.attention_backend``. This plant compiles a copy of the
installed ``load_dflash_model`` without that line and puts it where the lane calls it, so
the harness can be shown to catch the bug the project exists for.
"""

from __future__ import annotations

import inspect

from harness.lanes.selection import SelectionLane

FIX_LINE = "backend=speculative_config.attention_backend,"


def plant(lane: SelectionLane) -> None:
    """Runner plant (``tests.selection_lane.prefix_loader:plant``): patch vLLM only once the
    lane has installed the simulated platform, since importing vLLM earlier would resolve it."""
    lane.after_install(_install_prefix_loader)


def _install_prefix_loader() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    lines = inspect.getsource(loader_module.load_dflash_model).splitlines(keepends=True)
    kept = [line for line in lines if line.strip() != FIX_LINE]
    if len(kept) != len(lines) - 1:
        raise RuntimeError(f"this vLLM's load_dflash_model has no line {FIX_LINE!r}: cannot rebuild the pre-fix loader")
    namespace = dict(vars(loader_module))
    exec(compile("".join(kept), loader_module.__file__ or "load_dflash_model", "exec"), namespace)
    loader_module.load_dflash_model = namespace["load_dflash_model"]
