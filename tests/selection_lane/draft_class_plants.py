"""A fault planted where a draft's architecture becomes its model class: the model loader builds its
family's default class (DFlashQwen3ForCausalLM, DFlash2Qwen3ForCausalLM, Qwen3DSparkForCausalLM) for
every architecture a checkpoint names, as a registry entry or config rewrite pointing at the wrong
class would. The class audit (``ProcessState.judged_layers``, draft_model_class) must name it in
exactly the cells of the other registered classes (issue 38) whose draft is built at all.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.deployment.models import DRAFT_MODELS
from harness.lanes.selection import SelectionLane

# The family default classes, (module, class) as vLLM's registry maps the three families' architectures.
FAMILY_CLASSES = {
    "dflash": ("vllm.model_executor.models.qwen3_dflash", "DFlashQwen3ForCausalLM"),
    "dflash2": ("vllm.model_executor.models.qwen3_dflash2", "DFlash2Qwen3ForCausalLM"),
    "dspark": ("vllm.model_executor.models.qwen3_dspark", "Qwen3DSparkForCausalLM"),
}


def family_default_class(lane: SelectionLane) -> None:
    """Loader plant: ``get_model_architecture`` (model_loader/utils.py, which initialize_model asks for
    the class to build) answers each other draft class's architecture with its family's default class."""
    lane.after_install(_install)


def _install() -> None:
    from vllm.model_executor.model_loader import utils

    families = {model.architecture: model.family for model in DRAFT_MODELS.values()}
    original = utils.get_model_architecture

    def planted(model_config: Any) -> tuple[Any, str]:
        model_class, architecture = original(model_config)
        family = families.get(architecture)
        if family is None:
            return model_class, architecture
        module, name = FAMILY_CLASSES[family]
        return getattr(importlib.import_module(module), name), architecture

    utils.get_model_architecture = planted
