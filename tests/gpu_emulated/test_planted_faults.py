"""The gpu-emulated lane has teeth: faults planted into vLLM change exactly the verdicts they
should. Each test runs a small slice of the gpu lane's own flow (SM90 simulated, TRITON_ATTN's
kernels interpreted) in a fresh cell process with one plant applied: affected cells get the
planted verdict, every other cell keeps its expected one (``pass``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from cpu_lane.test_planted_faults import assert_changed_exactly
from selection_lane.kernel_blocks import DEFAULT_BLOCK

from harness.result import CellResult
from harness.runner.session import run_matrix
from harness.verdict import Verdict

from . import plants

pytestmark = pytest.mark.vllm


# vLLM 0.34.0 removed Model Runner V1's proposers: there the v1 cells are unavailable, before any
# kernel or plant runs (the lane's expectations say the same); the v2 cells still show each plant.
NO_V1_FROM_034 = (
    '[[expect]]\nwhen = { loader = "v1" }\nvllm = ">=0.34"\nverdict = "unavailable"\n'
    'message = "lacks vllm.v1.spec_decode.dflash.DFlashProposer"\nreason = "no Model Runner V1 from vLLM 0.34.0"\n'
)


def _matrix(folder: Path, loaders: str, cudagraphs: str, sinks: str = "true, false") -> Path:
    """TRITON_ATTN on simulated SM90, causal x sink, short contexts (the full matrix runs the long ones)."""
    (folder / "expected.toml").write_text(
        '[expectations]\ndefault = "pass"\nreason = "TRITON_ATTN serves every causal x sink cell"\n' + NO_V1_FROM_034
    )
    path = folder / f"planted-{loaders}-{cudagraphs}.toml".replace('"', "").replace(", ", "-")
    path.write_text(
        '[matrix]\nname = "planted"\nlane = "gpu_emulated"\nexpectations = "expected.toml"\n'
        "timeout_s = 600\n"
        '[axes]\ncapability = ["9.0"]\nbackend = ["TRITON_ATTN"]\ncausal = [true, false]\n'
        f'sink = [{sinks}]\ndtype = ["bfloat16"]\nloader = [{loaders}]\ncudagraph = [{cudagraphs}]\n'
        "[tolerance]\nbfloat16 = 2e-2\n"
        '[options]\ncontext_lens = [9, 40, 3]\nsm_counts = { "9.0" = 132 }\n'
    )
    return path


def planted(plant: Callable[..., None], matrix: Path) -> list[CellResult]:
    return run_matrix(matrix, plants=[f"{plant.__module__}:{plant.__name__}"])


def test_sinks_dropped_on_the_way_into_the_kernel_are_a_mismatch_exactly_in_sink_cells(tmp_path: Path) -> None:
    # Eager only: a graph replays the launches eager cells make (the metadata plant below is the
    # graph's own), and interpreted graph cells cost twice as much.
    results = planted(plants.drop_sinks_into_kernel, _matrix(tmp_path, '"v2"', '"eager"'))
    assert_changed_exactly(results, lambda axes: bool(axes["sink"]), Verdict.MISMATCH)
    # The sinks were dropped where the split-KV (3D) path ran: causal cells reduce segments
    # (one launch per layer and run), non-causal cells take the 2D path.
    for result in results:
        launches = result.details["triton_launches"]
        assert bool(launches.get("reduce_segments")) is bool(result.axes["causal"]), (result.id, launches)


def test_a_lost_non_causal_flag_is_a_mismatch_exactly_in_non_causal_cells(tmp_path: Path) -> None:
    results = planted(plants.lose_non_causal, _matrix(tmp_path, '"v2"', '"eager"'))
    assert_changed_exactly(results, lambda axes: not axes["causal"], Verdict.MISMATCH)


def test_metadata_frozen_at_capture_is_a_mismatch_exactly_in_graph_cells(tmp_path: Path) -> None:
    # Without sinks: seq_lens feeds every cell alike, so causal x graph is what tells the cells apart.
    results = planted(plants.reallocate_seq_lens, _matrix(tmp_path, '"v2"', '"eager", "graph"', sinks="false"))
    assert_changed_exactly(results, lambda axes: axes["cudagraph"] == "graph", Verdict.MISMATCH)


def test_a_request_lost_in_the_loader_is_wrong_backend_exactly_on_loader_v2(tmp_path: Path) -> None:
    results = planted(plants.lose_request_in_loader, _matrix(tmp_path, '"v2", "v1"', '"eager"'))
    assert_changed_exactly(results, lambda axes: axes["loader"] == "v2", Verdict.WRONG_BACKEND)


def _hybrid_matrix(folder: Path) -> Path:
    """TRITON_ATTN on simulated SM90 with uniform and hybrid drafts, windowed and not."""
    (folder / "expected.toml").write_text(
        '[expectations]\ndefault = "pass"\nreason = "TRITON_ATTN serves uniform and hybrid drafts on Model Runner V2"\n'
    )
    path = folder / "planted-hybrid.toml"
    path.write_text(
        '[matrix]\nname = "planted-hybrid"\nlane = "gpu_emulated"\nexpectations = "expected.toml"\ntimeout_s = 600\n'
        '[axes]\ncapability = ["9.0"]\nbackend = ["TRITON_ATTN"]\ncausal = [true, false]\nsink = [true]\n'
        'sliding_window = [0, 16]\ndtype = ["bfloat16"]\nloader = ["v2"]\ncudagraph = ["eager"]\n'
        '[cover]\nlayers = ["uniform", "mixed", "mixed_native"]\n'
        '[[exclude]]\nlayers = ["mixed", "mixed_native"]\nsliding_window = 0\n'
        '[[exclude]]\nlayers = "mixed_native"\ncausal = false\n'
        "[tolerance]\nbfloat16 = 2e-2\n"
        '[options]\ncontext_lens = [9, 40, 3]\nsm_counts = { "9.0" = 132 }\n'
    )
    return path


def test_a_hybrid_sliding_window_one_token_wider_is_wrong_setting_exactly_in_hybrid_cells(tmp_path: Path) -> None:
    """Uniform windowed cells keep their window; every hybrid cell's sliding layer carries one
    token more than its draft asked for, which the audit names (layer, setting, both values)
    before any number is computed."""
    results = planted(plants.widen_hybrid_sliding_window, _hybrid_matrix(tmp_path))
    assert {r.axes["layers"] for r in results} == {"uniform", "mixed", "mixed_native"}
    assert_changed_exactly(results, lambda axes: axes["layers"] != "uniform", Verdict.WRONG_SETTING)
    for result in results:
        if result.axes["layers"] != "uniform":
            window = int(str(result.axes["sliding_window"]))
            assert f"sliding_window is {window + 1}, the draft asked for {window}" in result.message, result.id
            # The sliding layer alone: the full layer keeps its (no) window.
            assert result.message.count(": sliding_window is ") == 1, result.message


def test_a_v2_loader_whose_scale_is_off_by_a_hair_is_wrong_setting_exactly_on_loader_v2(tmp_path: Path) -> None:
    """The cpu lane's V2 loader plant (a softmax scale 2**-16 off, within every tolerance): the
    audit names the scale in every v2 cell; v1 graph cells run eagerly, as Model Runner V1 runs
    draft attention, and keep their verdicts."""
    results = planted(plants.nudge_scale_in_v2_loader, _matrix(tmp_path, '"v2", "v1"', '"eager", "graph"'))
    assert_changed_exactly(results, lambda axes: axes["loader"] == "v2", Verdict.WRONG_SETTING)
    assert all(": scale is " in r.message for r in results if r.axes["loader"] == "v2")


def _fp8_matrix(folder: Path) -> Path:
    """TRITON_ATTN on simulated SM90, causal and not, an auto and an fp8 (e4m3, calibrated
    scales) KV cache, sinks, loader v2, eager: 4 cells."""
    (folder / "expected.toml").write_text(
        '[expectations]\ndefault = "pass"\nreason = "TRITON_ATTN serves auto and fp8 KV caches"\n'
    )
    path = folder / "planted-fp8.toml"
    path.write_text(
        '[matrix]\nname = "planted-fp8"\nlane = "gpu_emulated"\nexpectations = "expected.toml"\n'
        "timeout_s = 600\n"
        '[axes]\ncapability = ["9.0"]\nbackend = ["TRITON_ATTN"]\ncausal = [true, false]\nsink = [true]\n'
        'dtype = ["bfloat16"]\nkv_cache_dtype = ["auto", "fp8"]\nloader = ["v2"]\ncudagraph = ["eager"]\n'
        "[tolerance]\nbfloat16 = 2e-2\n"
        '[options]\ncontext_lens = [9, 40, 3]\nsm_counts = { "9.0" = 132 }\n'
    )
    return path


def _fp8(axes: Mapping[str, object]) -> bool:
    return axes["kv_cache_dtype"] == "fp8"


def test_a_two_percent_softmax_scale_error_is_a_mismatch_in_the_fp8_cells_as_in_the_others(tmp_path: Path) -> None:
    """The fp8 reference models the kernel's roundings (scaled K/V/Q, fp8 P @ V), so the fp8 cells
    are held to bf16's tolerance and a 2% scale error fails them too (issue 25: at 0.1, it did not)."""
    results = planted(plants.softmax_scale_two_percent_off, _fp8_matrix(tmp_path))
    assert {r.verdict for r in results} == {Verdict.MISMATCH}, [(r.id, r.message) for r in results]
    assert {r.axes["kv_cache_dtype"] for r in results} == {"auto", "fp8"}
    assert all(r.tolerance == 2e-2 for r in results), [(r.id, r.tolerance) for r in results]


def test_kv_scales_loaded_from_the_wrong_layer_are_wrong_setting_exactly_in_the_fp8_cells(tmp_path: Path) -> None:
    results = planted(plants.every_layer_loads_layer_zero_kv_scales, _fp8_matrix(tmp_path))
    assert_changed_exactly(results, _fp8, Verdict.WRONG_SETTING)
    for result in results:
        if _fp8(result.axes):
            # Layer 0 carries its own scales; the second layer (model.layers.3) carries layer 0's.
            assert ".layers.3.self_attn.attn: k_scale is " in result.message, result.message
            assert ".layers.3.self_attn.attn: v_scale is " in result.message, result.message
            assert ".layers.2." not in result.message, result.message


def test_a_key_scale_the_kernel_does_not_apply_is_a_mismatch_exactly_in_the_fp8_cells(tmp_path: Path) -> None:
    results = planted(plants.kernel_descales_keys_by_one, _fp8_matrix(tmp_path))
    assert_changed_exactly(results, _fp8, Verdict.MISMATCH)


def _block_size_matrix(folder: Path) -> Path:
    """TRITON_ATTN on simulated SM90, non-causal (DFlash's default), --block-size unset, 64 and
    128 under an auto target, both loaders, eager: 6 cells. Each lays its KV cache out with
    vLLM's runner and speculator functions and runs the draft against it."""
    (folder / "expected.toml").write_text(
        '[expectations]\ndefault = "pass"\nreason = "runner and speculator agree on the kernel block size"\n'
        + NO_V1_FROM_034
    )
    path = folder / "planted-block-size.toml"
    path.write_text(
        '[matrix]\nname = "planted-block-size"\nlane = "gpu_emulated"\nexpectations = "expected.toml"\n'
        "timeout_s = 600\n"
        '[axes]\ncapability = ["9.0"]\nbackend = ["TRITON_ATTN"]\ncausal = [false]\nsink = [false]\n'
        'dtype = ["bfloat16"]\nblock_size = ["unset", 64, 128]\nloader = ["v2", "v1"]\ncudagraph = ["eager"]\n'
        "[tolerance]\nbfloat16 = 2e-2\n"
        '[options]\ncontext_lens = [9, 40, 3]\nsm_counts = { "9.0" = 132 }\n'
    )
    return path


def test_a_speculator_on_its_own_kernel_blocks_fails_exactly_the_cells_with_a_block_size(tmp_path: Path) -> None:
    """The selection lane's kernel-block plant, with numbers: Model Runner V2's speculator builds
    the draft's metadata for 16-token kernel blocks while the runner laid the cache out in the
    cell's --block-size. Every loader-v2 cell with a --block-size other than vLLM's default (16 up
    to 0.33.x: 64 and 128; 64 from 0.34.0: 128) is wrong-setting (kernel_block_size, naming both
    values); --block-size unset or the default (the plant's own) and loader v1 (its proposer takes
    the runner's sizes; absent from 0.34.0) keep their verdicts."""
    results = planted(plants.speculator_on_default_blocks, _block_size_matrix(tmp_path))
    assert {r.axes.get("block_size", "unset") for r in results} == {"unset", 64, 128}, [r.id for r in results]
    assert_changed_exactly(
        results,
        lambda axes: axes["loader"] == "v2" and axes.get("block_size", "unset") not in ("unset", DEFAULT_BLOCK),
        Verdict.WRONG_SETTING,
    )
    for result in results:
        if result.verdict == Verdict.WRONG_SETTING:
            size = result.axes["block_size"]
            assert (
                f"kernel_block_size is {DEFAULT_BLOCK} in the speculator's metadata builder, {size} in the runner's"
            ) in result.message, result.message
        # Every cell that ran (all but 0.34.0's v1 cells) ran against vLLM's layout, and says so.
        if result.verdict != Verdict.UNAVAILABLE:
            assert isinstance(result.details["kv_cache"], dict), (result.id, result.details.get("kv_cache"))


def _heads_matrix(folder: Path) -> Path:
    """TRITON_ATTN on simulated SM90, causal and not, no sinks, eager, the draft's own heads at the
    lane's 4/2 (the target's), 4/4 (MHA) and 8/2 (GQA 4): 6 cells."""
    (folder / "expected.toml").write_text(
        '[expectations]\ndefault = "pass"\nreason = "TRITON_ATTN runs the draft\'s own heads"\n'
    )
    path = folder / "planted-heads.toml"
    path.write_text(
        '[matrix]\nname = "planted-heads"\nlane = "gpu_emulated"\nexpectations = "expected.toml"\n'
        "timeout_s = 600\n"
        '[axes]\ncapability = ["9.0"]\nbackend = ["TRITON_ATTN"]\ncausal = [true, false]\nsink = [false]\n'
        'draft_heads = ["2/1", "4/4", "8/2"]\ndtype = ["bfloat16"]\nloader = ["v2"]\ncudagraph = ["eager"]\n'
        "[tolerance]\nbfloat16 = 2e-2\n"
        '[options]\ncontext_lens = [9, 40, 3]\nsm_counts = { "9.0" = 132 }\n'
    )
    return path


def test_a_draft_layer_that_takes_the_target_heads_is_wrong_setting_exactly_where_they_differ(tmp_path: Path) -> None:
    """Issue 38's draft_heads plant: every attention layer takes the current config's (under the
    draft's loader, the target's 4/2) heads. The MHA and GQA-4 drafts are wrong-setting, naming
    num_kv_heads (4/4) or num_heads (8/2) and both values; the lane's own drafts keep passing."""
    results = planted(plants.draft_takes_target_heads, _heads_matrix(tmp_path))
    assert_changed_exactly(results, lambda axes: axes["draft_heads"] != "2/1", Verdict.WRONG_SETTING)
    for result in results:
        if result.axes["draft_heads"] == "4/4":
            assert "num_kv_heads is 2, the draft asked for 4" in result.message, result.message
        elif result.axes["draft_heads"] == "8/2":
            assert "num_heads is 4, the draft asked for 8" in result.message, result.message


def test_an_impl_attribute_no_audit_names_is_wrong_setting_by_provenance_exactly_on_loader_v2(
    tmp_path: Path,
) -> None:
    """The provenance audit in gpu-emulated (issue 38): Model Runner V2's loader flips an attribute
    of TRITON_ATTN's impl that neither the named audit nor the kernel reads. Every loader-v2 cell
    turns wrong-setting naming ``impl.use_alibi_sqrt`` and both values; loader v1 (its own loader)
    keeps its verdict (where the release has V1 at all)."""
    # Without sinks: the audit reads the impl whatever the kernel computes (the sink plants have theirs).
    matrix = _matrix(tmp_path, '"v2", "v1"', '"eager"', sinks="false")
    results = planted(plants.flip_unlisted_impl_attribute_in_v2_loader, matrix)
    assert_changed_exactly(results, lambda axes: axes["loader"] == "v2", Verdict.WRONG_SETTING)
    for result in results:
        named = f"impl.{plants.UNLISTED_IMPL_ATTRIBUTE} is" in (result.message or "")
        assert named is (result.axes["loader"] == "v2"), (result.id, result.message)


def test_a_layout_the_engine_refuses_stops_exactly_those_cells_at_startup(tmp_path: Path) -> None:
    """The start-up stage in gpu-emulated (issue 38): where vLLM's KV-cache planning refuses the
    layout (planted: every draft with sinks), the cell is unsupported at stage startup with vLLM's
    message and no kernel runs; the cells without sinks lay their cache out and keep passing."""
    results = planted(plants.refuse_layout_for_sink_drafts, _matrix(tmp_path, '"v2"', '"eager"'))
    assert_changed_exactly(results, lambda axes: bool(axes["sink"]), Verdict.UNSUPPORTED)
    for result in results:
        if result.axes["sink"]:
            assert result.stage == "startup" and "planted for a draft with attention sinks" in result.message, (
                result.id,
                result.stage,
                result.message,
            )
            assert "layers" not in result.details or not result.details["layers"], result.id
