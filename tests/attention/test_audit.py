"""The effective-settings audit's pure half: what a draft asked for, and the differences."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.attention.audit import SETTINGS, asked, differences, unaudited
from harness.attention.checkpoint import DraftSpec, DraftTruth, ModelShape

# torch (the checkpoint writer's) but no vLLM: runs in a lane's env with the other attention tests.
pytestmark = pytest.mark.vllm


def _truth(**spec: object) -> DraftTruth:
    return DraftTruth(Path("draft"), DraftSpec(**spec), ModelShape(head_dim=64), None)  # type: ignore[arg-type]


def test_the_ask_comes_from_what_the_harness_wrote() -> None:
    windowed = asked(_truth(causal=True, sink=False, sliding_window=16), "fp8")
    assert [layer["sliding_window"] for layer in windowed] == [16, 16]
    assert windowed[0]["kv_cache_spec_window"] == 16
    assert windowed[0] | {} == {
        "head_size": 64,
        "num_kv_heads": 2,
        "sliding_window": 16,
        "kv_cache_spec_window": 16,
        "sinks": False,
        "scale": 64**-0.5,
        "causal": True,
        "kv_cache_dtype": "fp8",
        "mm_prefix": False,
        "k_scale": 1.0,
        "v_scale": 1.0,
        "q_scale": 1.0,
    }
    full = asked(_truth(causal=False, sink=False, sliding_window=0), "auto")
    assert full[1]["sliding_window"] is None and full[1]["causal"] is False


def test_each_difference_names_layer_setting_and_both_values() -> None:
    want = asked(_truth(causal=False, sink=False, sliding_window=0), "auto")
    got = [dict(want[0]), dict(want[1], sliding_window=64, kv_cache_spec_window=64, mm_prefix=True)]
    found = differences(["l0", "l1"], want, got)
    assert [str(d) for d in found] == [
        "l1: sliding_window is 64, the draft asked for none",
        "l1: kv_cache_spec_window is 64, the draft asked for none",
        "l1: mm_prefix is True, the draft asked for False",
    ]


def test_a_scale_rounded_to_float32_is_the_same_scale_and_one_off_by_2_to_the_16_is_not() -> None:
    want = asked(_truth(causal=True, sink=False, sliding_window=0), "auto")
    import struct

    as_float32 = struct.unpack("f", struct.pack("f", want[0]["scale"]))[0]
    assert differences(["l0"], want[:1], [{"scale": as_float32}]) == ()
    off = want[0]["scale"] * (1 + 2**-16)
    assert [d.setting for d in differences(["l0"], want[:1], [{"scale": off}])] == ["scale"]


def test_a_setting_no_layer_exposes_is_listed_as_not_audited_never_a_difference() -> None:
    want = asked(_truth(causal=True, sink=True, sliding_window=0), "auto")
    got = [{"head_size": 64}, {"head_size": 64}]
    assert differences(["l0", "l1"], want, got) == ()
    assert unaudited(got) == [s for s in SETTINGS if s != "head_size"]


def test_each_layer_must_carry_its_own_written_kv_scales() -> None:
    """Another layer's scale, 1.0, or two copies (device tensor, host float) that disagree: each
    a difference naming the layer, the setting and both values."""
    truth = DraftTruth(
        Path("draft"), DraftSpec(causal=True, sink=False), ModelShape(head_dim=64), None, ((0.02, 0.03), (0.025, 0.035))
    )
    want = asked(truth, "fp8")
    assert [(layer["k_scale"], layer["v_scale"], layer["q_scale"]) for layer in want] == [
        (0.02, 0.03, 1.0),
        (0.025, 0.035, 1.0),
    ]
    got = [dict(want[0]), dict(want[1], k_scale=0.02, v_scale=1.0, q_scale="1.0 on the device, 0.025 on the host")]
    assert [str(d) for d in differences(["l0", "l1"], want, got)] == [
        "l1: k_scale is 0.02, the draft asked for 0.025",
        "l1: v_scale is 1.0, the draft asked for 0.035",
        "l1: q_scale is 1.0 on the device, 0.025 on the host, the draft asked for 1.0",
    ]
