"""A sibling of the DFlash loader losing the request: Model Runner V2's DSpark loader
(``load_dspark_model``) with the draft's backend dropped, planted into a cell process.

``load_dspark_model`` resolves the draft's backend (``_resolve_dspark_attention_backend``) and
passes it as ``backend=`` to the draft config's ``replace(...)``. This plant rebuilds the
installed loader without that argument, so the DSpark draft falls back to the target's
attention config, while ``load_dflash_model`` (dflash, dflash2) stays as installed: guarding
one loader of the family says nothing about its siblings, and the harness must tell them apart.
"""

from __future__ import annotations

from harness.lanes.selection import SelectionLane

from .pre_fix import rebuild_without

BACKEND_LINE = "backend=draft_attention_backend,"


def plant(lane: SelectionLane) -> None:
    """Runner plant (``tests.selection_lane.sibling_loader:plant``), after the simulated platform."""
    lane.after_install(_install_dspark_loader_without_backend)


def _install_dspark_loader_without_backend() -> None:
    import vllm.v1.worker.gpu.spec_decode.dspark.utils as loader_module

    rebuild_without(loader_module, "load_dspark_model", BACKEND_LINE)
