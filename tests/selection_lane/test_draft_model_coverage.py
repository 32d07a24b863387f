"""Every draft model class the installed vLLM registers for DFlash or DSpark is the class of some
method value the selection matrix builds (issue 38: one architecture per class), and every class
the harness names is either registered here or has its cells decided unavailable: a class a new
release adds is a failing test here, never a draft nobody built."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from harness.deployment.models import DRAFT_MODELS
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
# A DFlash/DSpark class names the family in its own name or its registered architecture (K3DSpark...,
# DFlashLaguna...), or subclasses a family class under another name (LiLiCorrForCausalLM(DFlashQwen3...)).
_FAMILY = re.compile(r"DFlash|DSpark")


def _module_source(module: str) -> str:
    """The source of a registry entry's module, read without importing it: some import only on
    their own platform (vllm/models/mistral/mistral_large4 refuses a CPU platform)."""
    name = module if module.startswith("vllm.") else f"vllm.model_executor.models.{module}"
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    return Path(spec.origin).read_text()


def _registered() -> dict[str, str]:
    """The installed registry's DFlash/DSpark draft classes, class name -> one architecture naming it
    (vllm/model_executor/models/registry.py, _SPECULATIVE_DECODING_MODELS)."""
    from vllm.model_executor.models import registry

    found: dict[str, str] = {}
    for architecture, (module, name) in registry._SPECULATIVE_DECODING_MODELS.items():
        subclass = re.search(rf"class {re.escape(name)}\([^)]*(?:DFlash|DSpark)", _module_source(module))
        if _FAMILY.search(architecture) or _FAMILY.search(name) or subclass:
            found.setdefault(name, architecture)
    return found


def test_every_registered_dflash_and_dspark_class_is_a_method_of_the_matrix() -> None:
    registered = _registered()
    assert len(registered) >= 9, registered  # the scan finds the families' classes at all
    named = {model.model_class for model in DRAFT_MODELS.values()}
    missing = {name: arch for name, arch in registered.items() if name not in named}
    assert not missing, (
        f"vLLM registers draft classes the harness does not build: {missing}; add a method value per class to "
        "harness/deployment/models.py DRAFT_MODELS (its config: class_config), harness/axes.py METHODS and the "
        "selection matrix's draft-class products"
    )
    used = {str(cell.values.get("method", "dflash")) for cell in expand(load_matrix(MATRIX))}
    assert set(DRAFT_MODELS) <= used, sorted(set(DRAFT_MODELS) - used)


def test_a_class_the_release_does_not_register_is_named_by_an_architecture_it_lacks() -> None:
    # Such a class's cells are unavailable (SpeculativeConfig's registry check, harness.attention.apis
    # unregistered_architecture), so its architecture must be absent too, not mapped to another class.
    from vllm.model_executor.models import registry

    models = registry._SPECULATIVE_DECODING_MODELS
    registered = {name for _, name in models.values()}
    for method, model in DRAFT_MODELS.items():
        if model.model_class in registered:
            assert models.get(model.architecture, (None, model.model_class))[1] == model.model_class, method
        else:
            assert model.architecture not in models, (method, models[model.architecture])
