"""The seam audit has teeth in the selection lane: a loader that lets the draft take the
target's KV-cache dtype (its own dropped, or an explicit "auto" read as unset), or builds the
draft in its checkpoint's dtype instead of the target's, is wrong-setting, naming layer, setting
and both values, in exactly the cells whose draft asked for something else, and nowhere else."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from harness.deployment.models import draft_family
from harness.result import CellResult
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import seam_plants
from .pre_fix import BEFORE_FIX, VLLM
from .slices import plant_slice_cells

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(BEFORE_FIX, reason=f"vLLM {VLLM} has no speculative kv_cache_dtype to lose"),
]

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"
FP8 = ("fp8", "fp8_e5m2")


def test_a_draft_kv_dtype_the_loader_drops_is_wrong_setting_exactly_where_the_draft_asked_for_one() -> None:
    # SM90 and SM120: FlashAttention 3, FlashInfer and TRITON_ATTN's fp8 paths between them.
    results = _plant_run(
        "keep_target_cache_dtype",
        lambda v: (
            v["capability"] in ("9.0", "12.0")
            and (
                v["draft_kv_cache_dtype"] == "fp8"
                or (v["capability"] == "12.0" and v["backend"] == "TRITON_ATTN" and v["sink"])
            )
        ),
    )
    # Dropped, the draft's fp8 becomes the target's: a change wherever the target's is not fp8 too.
    should = {
        r.id
        for r in results
        if _built_by_load_dflash_model(r.axes)
        and r.axes["draft_kv_cache_dtype"] == "fp8"
        and r.axes["kv_cache_dtype"] != "fp8"
        and r.expected == Verdict.PASS
    }
    changed = {r.id: r for r in results if r.verdict != r.expected}
    for result in changed.values():
        # Only a draft that set its own dtype, to something else than the target's (the controls'
        # explicit "auto" behind an fp8 target is one).
        own, target = result.axes["draft_kv_cache_dtype"], result.axes["kv_cache_dtype"]
        assert _built_by_load_dflash_model(result.axes), result.id
        assert own != "target" and own != target, (result.id, result.message)
    assert "sm120-TRITON_ATTN-causal-sink-dkv-fp8-tgt.FLASHINFER-tgtdt.fp16-v2-cubin" in should, sorted(should)
    assert should <= set(changed), sorted(should - set(changed))
    for result in (changed[i] for i in should):
        target = result.axes["kv_cache_dtype"]
        if result.verdict == Verdict.WRONG_BACKEND and result.requested_backend is None:
            # Auto-selection redone for the target's fp8_e5m2, which FlashAttention refuses.
            assert target == "fp8_e5m2" and "draft layers carry" in result.message, result.message
            continue
        if result.verdict == Verdict.CRASH and target == "fp8_e5m2":
            # A requested backend that takes fp8 e4m3 only (TRITON_ATTN_DIFFKV): handed the target's
            # e5m2, the loader's selector refuses the draft it was asked to build.
            assert "kv_cache_dtype not supported" in result.message, result.message
            continue
        assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
        assert f"kv_cache_dtype is {target}, the draft asked for fp8" in result.message, result.message
    assert any(r.ok and r.axes["draft_kv_cache_dtype"] == "target" for r in results)


def _plant_run(plant: str, keep: Callable[[dict[str, Any]], bool]) -> list[CellResult]:
    # The plants change the loader, which every generation runs alike; the generation and the
    # cubins decide only which backend serves a cell. So each test takes the cells with
    # FlashInfer's cubins of one or two generations whose backends answer differently for its dtypes
    # (each generation is a cell process of its own, a vLLM import, plus its cells).
    cells = [c for c in plant_slice_cells() if keep(c.values) and c.values["flashinfer_cubin"]]
    return run_matrix(MATRIX, plants=[f"{seam_plants.__name__}:{plant}"], cell_ids=[c.id for c in cells])


def _built_by_load_dflash_model(axes: Mapping[str, Any]) -> bool:
    # Every draft class of the dflash and dflash2 families (issue 38's other classes among them).
    return axes["loader"] == "v2" and draft_family(str(axes["method"])) in ("dflash", "dflash2")


def test_an_explicit_auto_draft_kv_dtype_treated_as_unset_is_wrong_setting_exactly_behind_an_fp8_target() -> None:
    # SM90 beside SM80, whose TRITON_ATTN cannot build an fp8 cache at all.
    results = _plant_run(
        "explicit_auto_kv_is_unset",
        lambda v: (
            v["capability"] in ("8.0", "9.0")
            and (
                v["draft_kv_cache_dtype"] == "auto"
                # The controls: an unset draft dtype behind SM90's fp8 targets, which it inherits.
                or (v["capability"] == "9.0" and v["draft_kv_cache_dtype"] == "target" and v["kv_cache_dtype"] in FP8)
            )
        ),
    )
    should = {
        r.id
        for r in results
        if _built_by_load_dflash_model(r.axes)
        and r.axes["draft_kv_cache_dtype"] == "auto"
        and r.axes["kv_cache_dtype"] != "auto"
        and r.expected == Verdict.PASS
    }
    changed = {r.id: r for r in results if r.verdict != r.expected}
    for result in changed.values():
        # Where the platform accepted the draft's own "auto" but the loader now selects for fp8, a
        # backend may refuse the draft instead: still only behind an fp8 target, only these loaders.
        assert _built_by_load_dflash_model(result.axes), result.id
        assert (result.axes["draft_kv_cache_dtype"], result.axes["kv_cache_dtype"] != "auto") == ("auto", True)
    assert should and should <= set(changed), sorted(should - set(changed))
    for result in (changed[i] for i in should):
        target = result.axes["kv_cache_dtype"]
        if result.axes["capability"] == "8.0" and result.verdict == Verdict.CRASH:
            # SM80's TRITON_ATTN cannot build the fp8 cache the plant hands the draft (it raises at build).
            assert "native FP8 (fp8e4nv) requires SM89+" in result.message, result.message
            continue
        if result.verdict == Verdict.CRASH and target == "fp8_e5m2":
            # A requested backend that takes fp8 e4m3 only refuses the target's e5m2 at the loader's selection.
            assert "kv_cache_dtype not supported" in result.message, result.message
            continue
        assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
        assert f"kv_cache_dtype is {target}, the draft asked for auto" in result.message, result.message
        assert "kv_cache_torch_dtype is torch.uint8, the draft asked for torch." in result.message, result.message
    # An unset draft dtype behind the same fp8 targets inherits theirs, planted or not.
    inherited = [
        r for r in results if r.axes["draft_kv_cache_dtype"] == "target" and r.axes["kv_cache_dtype"] != "auto"
    ]
    assert any(r.ok for r in inherited)


def test_a_draft_built_in_its_checkpoint_dtype_is_wrong_setting_exactly_behind_an_fp16_or_fp32_target() -> None:
    results = _plant_run(
        "draft_keeps_checkpoint_dtype",
        # bfloat16 targets (the control) behind the fp8 caches; the other targets behind every cache.
        lambda v: v["capability"] == "9.0" and (v["target_dtype"] != "bfloat16" or v["kv_cache_dtype"] in FP8),
    )
    should = {
        r.id
        for r in results
        if _built_by_load_dflash_model(r.axes) and r.axes["target_dtype"] != "bfloat16" and r.expected == Verdict.PASS
    }
    changed = {r.id: r for r in results if r.verdict != r.expected}
    for result in changed.values():
        assert _built_by_load_dflash_model(result.axes) and result.axes["target_dtype"] != "bfloat16", result.id
    assert should and should <= set(changed), sorted(should - set(changed))
    for result in (changed[i] for i in should):
        wanted = f"dtype is torch.bfloat16, the draft asked for torch.{result.axes['target_dtype']}"
        assert wanted in result.message, result.message
        if result.verdict == Verdict.WRONG_BACKEND and result.requested_backend is None:
            # Auto-selection redone for the checkpoint's bfloat16 picks another backend: the more severe
            # verdict, with the dtype named beside it.
            continue
        assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
    # The bfloat16 targets' cells here are the control: the checkpoint's dtype is theirs.
    assert any(r.ok and r.axes["target_dtype"] == "bfloat16" for r in results)


def _on_flash_attn_impl(result: CellResult) -> bool:
    return any("(FlashAttentionImpl," in line for line in result.details.get("draft_layers", ()))


def _layers_judged(result: CellResult) -> bool:
    # A release whose Attention vLLM cannot build as a reference leaves its layers not judged (said
    # so in the details); there the plant has no audit to meet, and `should` below comes out empty.
    found = result.details.get("provenance")
    return found is not None and not any(": no reference (" in line for line in found["not_judged"])


def test_an_unlisted_impl_attribute_forced_on_the_draft_is_wrong_setting_exactly_on_its_cells() -> None:
    # SM90's FLASH_ATTN requests: FlashAttentionImpl drafts on both loaders and every method, the
    # other loaders (V1, DSpark) are the controls the plant does not reach.
    results = _plant_run("force_batch_invariance", lambda v: v["capability"] == "9.0" and v["backend"] == "FLASH_ATTN")
    planted = {
        r.id for r in results if _built_by_load_dflash_model(r.axes) and _on_flash_attn_impl(r) and _layers_judged(r)
    }
    should = {r.id for r in results if r.id in planted and r.expected == Verdict.PASS}
    changed = {r.id: r for r in results if r.verdict != r.expected}
    assert should and set(changed) == should, (sorted(should), sorted(changed))
    named = f"impl.{seam_plants.UNLISTED_IMPL_ATTRIBUTE} is "
    for result in changed.values():
        assert result.verdict == Verdict.WRONG_SETTING, (result.id, result.verdict, result.message)
        assert named in result.message and "the draft asked for" in result.message, result.message
    for result in results:
        # Where the named audits already decide the verdict, the provenance audit's finding is in
        # the details only; nowhere else does it name the attribute.
        found = " ".join(result.details.get("provenance", {}).get("differences", ()))
        assert (named in found) == (result.id in planted), (result.id, found)
    # The controls: FlashAttentionImpl drafts another loader built (V1 where the release has it, DSpark).
    assert any(r.ok and _on_flash_attn_impl(r) and not _built_by_load_dflash_model(r.axes) for r in results)
