"""The draft class audit has teeth in the selection lane (issue 38): a vLLM whose loader builds the
family's default class for every draft architecture is caught in every cell of the other registered
draft classes whose draft vLLM builds today (wrong-setting naming model_class and both classes, or a
crash where the default class cannot read that class's config), changes no cell of the three
families (the control), and changes nothing but the other classes' cells."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.deployment.models import DRAFT_MODELS
from harness.matrix import expand, load_matrix
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import draft_class_plants

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
FAMILIES = ("dflash", "dflash2", "dspark")


def test_a_loader_that_builds_the_family_default_class_is_wrong_setting_on_exactly_the_other_classes() -> None:
    # SM90 (one cell process): every other class on each backend SM90 builds these drafts on, and
    # the three families on the same backends behind the same target as the control. The product's
    # other backends refuse the draft at select on SM90 (0.33.0 and 0.34.0), before any loader runs,
    # so the plant could not reach them; the lane itself runs them.
    backends = BUILT_ON_SM90
    cells = [
        c
        for c in expand(load_matrix(MATRIX))
        if c.values["capability"] == "9.0"
        and c.values["backend"] in backends
        and c.values["loader"] == "v2"
        and c.values.get("target_attention", "auto") == "auto"
        and c.values.get("draft_option", "none") == "none"
        and c.values.get("draft_heads", "2/1") == "2/1"
        and all(c.values.get(axis, default) == default for axis, default in _DEFAULTS.items())
    ]
    results = run_matrix(
        MATRIX, plants=[f"{draft_class_plants.__name__}:family_default_class"], cell_ids=[c.id for c in cells]
    )
    assert len(results) == len(cells)
    should = {r.id for r in results if r.axes.get("method", "dflash") not in FAMILIES and r.expected == Verdict.PASS}
    changed = {r.id: r for r in results if r.verdict != r.expected}
    assert len(should) >= 30, sorted(should)
    # Every cell whose draft vLLM builds today is caught, naming the class; a cell whose build fails
    # today for its own class's reason (an MLA refusal, a layer-name collision) may change too, as
    # the default class builds where its own did not (or the default class cannot read the config):
    # still only the other classes' cells. The families' cells never change.
    assert should <= set(changed), sorted(should - set(changed))
    assert all(r.axes.get("method", "dflash") not in FAMILIES for r in changed.values()), sorted(changed)
    # Caught as the class audit names it, or as a crash where the default class cannot read the
    # class's own config (a Laguna config's per-layer RoPE parameters under DFlashQwen3ForCausalLM).
    named = [changed[ident] for ident in should if changed[ident].verdict == Verdict.WRONG_SETTING]
    assert len(named) >= 20, len(named)
    assert all(changed[ident].verdict in (Verdict.WRONG_SETTING, Verdict.CRASH) for ident in should)
    for result in named:
        model = DRAFT_MODELS[str(result.axes["method"])]
        assert f"model_class is {_family_class(model.family)}, the draft asked for {model.model_class}" in (
            result.message
        ), result.message
    assert any(r.ok and r.axes.get("method", "dflash") in FAMILIES for r in results)


BUILT_ON_SM90 = frozenset(
    {"auto", "FLASH_ATTN", "FLASH_ATTN_DIFFKV", "TRITON_ATTN", "TRITON_ATTN_DIFFKV", "FLASHINFER", "FLEX_ATTENTION"}
)

# The default of every axis the families' method product leaves at it (so the controls are its cells).
_DEFAULTS = {
    "sink": False,
    "flashinfer_cubin": True,
    "sliding_window": 0,
    "layers": "uniform",
    "target_model": "qwen3",
    "target_head": "qwen3",
    "kv_cache_dtype": "auto",
    "draft_kv_cache_dtype": "target",
    "target_dtype": "bfloat16",
    "head_size": 128,
    "block_size": "unset",
    "cudagraph": "eager",
}


def _family_class(family: str) -> str:
    return draft_class_plants.FAMILY_CLASSES[family][1]
