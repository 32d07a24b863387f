"""The KV-cache layout check (harness.attention.kv_cache): a draft layer whose metadata the
speculator builds for another kernel block size than the runner gave its cache, or than the
view it is bound to, is named with both values; agreement names nothing."""

from __future__ import annotations

import pytest

from harness.attention.kv_cache import CudaGraphDecision, DraftBinding, GroupLayout, KvCacheLayout, disagreements

pytestmark = pytest.mark.pure

LAYER = "model.layers.4.self_attn.attn"


def _layout(runner: int, speculator: int, view: int | None) -> KvCacheLayout:
    group = GroupLayout(0, "FullAttentionSpec", 128, ("model.layers.0.self_attn.attn", LAYER), runner, speculator)
    shape = None if view is None else (24, 1, view, 256)
    binding = DraftBinding(LAYER, 0, "TRITON_ATTN", runner, speculator, view, shape)
    return KvCacheLayout((group,), (binding,))


def test_runner_and_speculator_on_one_kernel_block_agree() -> None:
    assert disagreements(_layout(64, 64, 64)) == ()
    assert disagreements(_layout(128, 128, None)) == ()


def test_a_speculator_on_another_kernel_block_is_named_with_both_values_and_the_view() -> None:
    (found,) = disagreements(_layout(64, 128, 64))
    assert str(found) == (
        f"{LAYER}: kernel_block_size is 128 in the speculator's metadata builder, 64 in the runner's, "
        "bound to a 64-token-block view"
    )


def test_a_view_in_another_block_size_than_both_builders_is_a_disagreement() -> None:
    assert disagreements(_layout(128, 128, 64))


def test_details_are_plain_data() -> None:
    details = _layout(64, 128, 64).details()
    assert details["groups"][0]["runner_kernel_block"] == 64
    assert details["draft_layers"][0]["view_shape"] == (24, 1, 64, 256)


def test_a_layout_without_the_graph_decision_reads_as_before() -> None:
    details = _layout(64, 64, 64).details()
    assert "cudagraph" not in details
    assert "runner_cudagraph_support" not in details["groups"][0]


def test_the_graph_decision_is_in_the_details_per_group_and_as_modes() -> None:
    group = GroupLayout(
        0, "FullAttentionSpec", 16, (LAYER,), 16, 16, ("FLASHINFER: UNIFORM_BATCH",), ("FLASHINFER: NEVER",)
    )
    decision = CudaGraphDecision("FULL_DECODE_ONLY", "FULL_DECODE_ONLY", "NONE")
    details = KvCacheLayout((group,), (), decision).details()
    assert details["cudagraph"] == {"requested": "FULL_DECODE_ONLY", "runner": "FULL_DECODE_ONLY", "speculator": "NONE"}
    assert details["groups"][0]["speculator_cudagraph_support"] == ("FLASHINFER: NEVER",)
