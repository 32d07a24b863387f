"""A sibling of the DFlash loader losing the request: Model Runner V2's DSpark loader
(``load_dspark_model``) with the draft's backend dropped, planted into a cell process.

``load_dspark_model`` resolves the draft's backend (``_resolve_dspark_attention_backend``) and
passes it as ``backend=`` to the draft config's ``replace(...)``. This plant rebuilds the
installed loader without that argument, so the DSpark draft falls back to the target's
attention config, while ``load_dflash_model`` (dflash, dflash2) stays as installed: guarding
one loader of the family says nothing about its siblings, and the harness must tell them apart.
"""

from __future__ import annotations

import inspect

from harness.lanes.selection import SelectionLane

BACKEND_LINE = "backend=draft_attention_backend,"


def plant(lane: SelectionLane) -> None:
    """Runner plant (``tests.selection_lane.sibling_loader:plant``), after the simulated platform."""
    lane.after_install(_install_dspark_loader_without_backend)


def _install_dspark_loader_without_backend() -> None:
    import vllm.v1.worker.gpu.spec_decode.dspark.utils as loader_module

    lines = inspect.getsource(loader_module.load_dspark_model).splitlines(keepends=True)
    kept = [line for line in lines if line.strip() != BACKEND_LINE]
    if len(kept) != len(lines) - 1:
        raise RuntimeError(f"this vLLM's load_dspark_model has no line {BACKEND_LINE!r}: cannot plant the sibling")
    namespace = dict(vars(loader_module))
    exec(compile("".join(kept), loader_module.__file__ or "load_dspark_model", "exec"), namespace)
    loader_module.load_dspark_model = namespace["load_dspark_model"]
