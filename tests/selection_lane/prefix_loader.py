"""The Model Runner V2 DFlash loader as it was before vLLM PR #46770, planted into a cell process.

The fix added one argument to the draft config's ``replace(...)``:
``backend=speculative_config.attention_backend``. This plant compiles a copy of the
installed ``load_dflash_model`` without that line and puts it where the lane calls it, so
the harness can be shown to catch the bug the project exists for.
"""

from __future__ import annotations

import inspect
from types import ModuleType

from harness.lanes.selection import SelectionLane

FIX_LINE = "backend=speculative_config.attention_backend,"


def plant(lane: SelectionLane) -> None:
    """Runner plant (``tests.selection_lane.prefix_loader:plant``): patch vLLM only once the
    lane has installed the simulated platform, since importing vLLM earlier would resolve it."""
    lane.after_install(_install_prefix_loader)


def _install_prefix_loader() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    rebuild_without(loader_module, "load_dflash_model", FIX_LINE, "cannot rebuild the pre-fix loader")


def rebuild_without(module: ModuleType, function: str, line: str, otherwise: str) -> None:
    """Replace ``module.function`` with a copy compiled from its installed source without
    ``line`` (exactly one line, stripped); a release without that line cannot be planted."""
    lines = inspect.getsource(getattr(module, function)).splitlines(keepends=True)
    kept = [source for source in lines if source.strip() != line]
    if len(kept) != len(lines) - 1:
        raise RuntimeError(f"this vLLM's {function} has no line {line!r}: {otherwise}")
    namespace = dict(vars(module))
    exec(compile("".join(kept), module.__file__ or function, "exec"), namespace)
    setattr(module, function, namespace[function])
