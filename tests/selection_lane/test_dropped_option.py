"""The draft_option check has teeth: a loader that drops one speculative option the draft set
(its max_model_len, tests/selection_lane/dropped_option.py) is wrong-setting, naming the field
and both values, in exactly the cells whose draft set that option on that loader, and every other
cell of the same processes (other options, other loaders, no option) keeps its verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.axes import AXES_BY_NAME
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import dropped_option
from .slices import plant_slice_cells

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
# The dropped option, options that reach the same ModelConfig beside it, and the controls.
OPTIONS = ("maxlen128", "revision", "coderevision", "nspec2", "none")
# The draft_option cells' other axes, at their defaults (the draft_option [[product]] blocks).
AT_DEFAULT = (
    "head_size",
    "kv_cache_dtype",
    "draft_kv_cache_dtype",
    "target_attention",
    "target_model",
    "target_dtype",
    "block_size",
    "draft_heads",
    "cudagraph",
)


def test_a_speculative_option_the_loader_drops_is_wrong_setting_exactly_where_the_draft_set_it() -> None:
    cells = [
        c
        for c in plant_slice_cells()
        if c.values["capability"] == "9.0"
        and c.values["backend"] == "auto"
        and not c.values["causal"]
        and not c.values["sink"]
        and c.values["flashinfer_cubin"]
        and c.values.get("draft_option", "none") in OPTIONS
        # The three families (the other draft classes' cells of issue 38 set no option).
        and c.values.get("method", "dflash") in ("dflash", "dflash2", "dspark")
        and all(c.values.get(axis, AXES_BY_NAME[axis].default) == AXES_BY_NAME[axis].default for axis in AT_DEFAULT)
    ]
    results = run_matrix(MATRIX, plants=[f"{dropped_option.__name__}:plant"], cell_ids=[c.id for c in cells])
    # Each option on dflash, dflash2 and dspark (v2) and dflash on v1.
    assert len(results) == len(cells) == 4 * len(OPTIONS)

    should = {
        r.id
        for r in results
        if r.axes.get("draft_option") == "maxlen128"
        and r.axes["loader"] == "v2"
        and r.axes.get("method", "dflash") in ("dflash", "dflash2")
    }
    assert len(should) == 2, sorted(should)
    changed = {r.id: r for r in results if r.verdict != r.expected}
    assert set(changed) == should, sorted(changed)
    for result in changed.values():
        assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
        assert f"draft_model.{dropped_option.DROPPED} is 256, the draft asked for 128" in result.message, result.message
    # The same option on the loaders the plant does not touch reaches the draft, planted or not.
    assert any(r.ok and r.axes.get("draft_option") == "maxlen128" for r in results)
