"""The effective-settings audit's pure half: what a draft asked for, and the differences."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.attention.audit import SETTINGS, Requested, asked, differences, unaudited
from harness.deployment.models import DraftSpec, DraftTruth, ModelShape

# torch (the checkpoint writer's) but no vLLM: runs in a lane's env with the other attention tests.
pytestmark = pytest.mark.vllm


def _truth(**spec: object) -> DraftTruth:
    return DraftTruth(Path("draft"), DraftSpec(**spec), ModelShape(head_dim=64), None)  # type: ignore[arg-type]


AUTO = Requested(None, "auto", "bfloat16")


def test_the_ask_comes_from_what_the_harness_wrote() -> None:
    windowed = asked(_truth(causal=True, sink=False, sliding_window=16), Requested("fp8", "auto", "float16"))
    assert [layer["sliding_window"] for layer in windowed] == [16, 16]
    assert windowed[0]["kv_cache_spec_window"] == 16
    assert windowed[0] | {} == {
        "head_size": 64,
        "num_heads": 4,
        "num_kv_heads": 2,
        "sliding_window": 16,
        "kv_cache_spec_window": 16,
        "sinks": False,
        "scale": 64**-0.5,
        "causal": True,
        "dtype": "torch.float16",
        "kv_cache_dtype": "fp8",
        "kv_cache_torch_dtype": "torch.uint8",
        "mm_prefix": False,
        "k_scale": 1.0,
        "v_scale": 1.0,
        "q_scale": 1.0,
        "flash_attn_version": None,
    }
    full = asked(_truth(causal=False, sink=False, sliding_window=0), AUTO)
    assert full[1]["sliding_window"] is None and full[1]["causal"] is False


def test_each_difference_names_layer_setting_and_both_values() -> None:
    want = asked(_truth(causal=False, sink=False, sliding_window=0), AUTO)
    got = [dict(want[0]), dict(want[1], sliding_window=64, kv_cache_spec_window=64, mm_prefix=True)]
    found = differences(["l0", "l1"], want, got)
    assert [str(d) for d in found] == [
        "l1: sliding_window is 64, the draft asked for none",
        "l1: kv_cache_spec_window is 64, the draft asked for none",
        "l1: mm_prefix is True, the draft asked for False",
    ]


def test_a_scale_rounded_to_float32_is_the_same_scale_and_one_off_by_2_to_the_16_is_not() -> None:
    want = asked(_truth(causal=True, sink=False, sliding_window=0), AUTO)
    import struct

    as_float32 = struct.unpack("f", struct.pack("f", want[0]["scale"]))[0]
    assert differences(["l0"], want[:1], [{"scale": as_float32}]) == ()
    off = want[0]["scale"] * (1 + 2**-16)
    assert [d.setting for d in differences(["l0"], want[:1], [{"scale": off}])] == ["scale"]


def test_a_setting_no_layer_exposes_is_listed_as_not_audited_never_a_difference() -> None:
    want = asked(_truth(causal=True, sink=True, sliding_window=0), AUTO)
    got = [{"head_size": 64}, {"head_size": 64}]
    assert differences(["l0", "l1"], want, got) == ()
    assert unaudited(got) == [s for s in SETTINGS if s != "head_size"]


@pytest.mark.parametrize(
    ("draft", "target", "dtype", "string", "element"),
    [
        # unset: the target's resolved dtype (its own fp8, or its model dtype for auto)
        (None, "fp8", "bfloat16", "fp8", "torch.uint8"),
        (None, "auto", "float16", "auto", "torch.float16"),
        # an explicit "auto": the draft's model dtype (the target's by design), whatever the target's cache
        ("auto", "fp8", "bfloat16", "auto", "torch.bfloat16"),
        ("auto", "fp8_e5m2", "float32", "auto", "torch.float32"),
        # explicit: itself
        ("fp8", "auto", "bfloat16", "fp8", "torch.uint8"),
        ("bfloat16", "auto", "float16", "bfloat16", "torch.bfloat16"),
    ],
)
def test_the_draft_kv_dtype_asked_for_tells_unset_from_an_explicit_auto(
    draft: str | None, target: str, dtype: str, string: str, element: str
) -> None:
    want = asked(_truth(causal=False, sink=False), Requested(draft, target, dtype))[0]
    assert (want["kv_cache_dtype"], want["kv_cache_torch_dtype"], want["dtype"]) == (string, element, f"torch.{dtype}")


def test_a_draft_that_took_the_target_fp8_cache_behind_an_explicit_auto_is_a_difference() -> None:
    want = asked(_truth(causal=False, sink=False), Requested("auto", "fp8", "bfloat16"))
    got = [dict(layer, kv_cache_dtype="fp8", kv_cache_torch_dtype="torch.uint8") for layer in want]
    assert [str(d) for d in differences(["l0"], want[:1], got[:1])] == [
        "l0: kv_cache_dtype is fp8, the draft asked for auto",
        "l0: kv_cache_torch_dtype is torch.uint8, the draft asked for torch.bfloat16",
    ]


def test_each_layer_must_carry_its_own_written_kv_scales() -> None:
    """Another layer's scale, 1.0, or two copies (device tensor, host float) that disagree: each
    a difference naming the layer, the setting and both values."""
    truth = DraftTruth(
        Path("draft"), DraftSpec(causal=True, sink=False), ModelShape(head_dim=64), None, ((0.02, 0.03), (0.025, 0.035))
    )
    want = asked(truth, Requested("fp8", "auto", "bfloat16"))
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


def test_a_flash_attention_version_is_judged_where_the_lane_knows_the_platforms_and_listed_where_not() -> None:
    # The selection lane asks the platform for the draft's own settings (3 on SM90); a TurboQuant
    # target's engine forces 2 on every layer, the draft's included.
    known = asked(
        _truth(causal=False, sink=False, sliding_window=0), Requested("auto", "turboquant_k8v4", "bfloat16", 3)
    )
    got = [dict(known[0], flash_attn_version=2), dict(known[1], flash_attn_version=3)]
    assert [str(d) for d in differences(["l0", "l1"], known, got)] == [
        "l0: flash_attn_version is 2, the draft asked for 3"
    ]
    assert "flash_attn_version" not in unaudited(got, known)
    # A lane that does not ask the platform: never a difference, always listed as not audited.
    unknown = asked(_truth(causal=False, sink=False, sliding_window=0), AUTO)
    got = [dict(unknown[0], flash_attn_version=2), dict(unknown[1], flash_attn_version=2)]
    assert differences(["l0", "l1"], unknown, got) == ()
    assert "flash_attn_version" in unaudited(got, unknown)
