"""A planted fault at the seam issue 38 opened: a speculative option the draft sets is dropped on
its way into the draft. Model Runner V2's DFlash loader (dflash, dflash2) is handed a draft model
config that has lost the draft's own ``max_model_len`` (it carries the target's instead), as a
loader that rebuilt the draft's ModelConfig without that field would. The draft_option check
(``harness.attention.draft_options``) must name it in exactly the cells whose draft set it."""

from __future__ import annotations

import copy
import functools
from typing import Any

from harness.lanes.selection import SelectionLane

DROPPED = "max_model_len"


def plant(lane: SelectionLane) -> None:
    """Runner plant (``tests.selection_lane.dropped_option:plant``), in the cell process."""
    lane.after_install(_install)


def _install() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    load_dflash_model = loader_module.load_dflash_model

    @functools.wraps(load_dflash_model)
    def planted(target_model: Any, vllm_config: Any) -> Any:
        speculative = vllm_config.speculative_config
        own = speculative.draft_model_config
        dropped = copy.copy(own)
        setattr(dropped, DROPPED, getattr(vllm_config.model_config, DROPPED))
        speculative.draft_model_config = dropped
        try:
            return load_dflash_model(target_model, vllm_config)
        finally:
            speculative.draft_model_config = own

    loader_module.load_dflash_model = planted
