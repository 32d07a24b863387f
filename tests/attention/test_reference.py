"""The fp32 reference against plain loops over scalars: sinks, windows, causality, GQA.

Needs torch only (no vLLM), so any lane's environment can run it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from harness.attention.reference import reference_attention, visible_keys

pytestmark = pytest.mark.vllm


def brute_force(q, keys, values, query_lens, scale, causal, sinks, window):
    """One query, one head, one key at a time, straight from the definitions in the module docstring."""
    heads = q.shape[1]
    out = torch.zeros(q.shape, dtype=torch.float64)
    token = 0
    for k, v, q_len in zip(keys, values, query_lens, strict=True):
        seq_len, kv_heads, dim = k.shape
        for i in range(q_len):
            pos = seq_len - q_len + i
            for h in range(heads):
                kv = h // (heads // kv_heads)
                logits = []
                for j in range(seq_len):
                    if causal and j > pos:
                        continue
                    if window and (pos - j >= window or (not causal and j - pos >= window)):
                        continue
                    dot = sum(float(q[token, h, d]) * float(k[j, kv, d]) for d in range(dim))
                    logits.append((j, dot * scale))
                top = max([s for _, s in logits] + ([sinks[h]] if sinks else []))
                denom = sum(math.exp(s - top) for _, s in logits)
                if sinks:
                    denom += math.exp(sinks[h] - top)
                for j, s in logits:
                    weight = math.exp(s - top) / denom
                    for d in range(dim):
                        out[token, h, d] += weight * float(v[j, kv, d])
            token += 1
    return out


def tiny_batch(seed: int = 0, heads: int = 4, kv_heads: int = 2, dim: int = 3):
    generator = torch.Generator().manual_seed(seed)
    seq_lens, query_lens = (7, 3, 12), (3, 2, 3)
    q = torch.randn(sum(query_lens), heads, dim, generator=generator)
    keys = [torch.randn(s, kv_heads, dim, generator=generator) for s in seq_lens]
    values = [torch.randn(s, kv_heads, dim, generator=generator) for s in seq_lens]
    return q, keys, values, query_lens


SINKS = (1.5, -0.5, 3.0, 0.25)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
@pytest.mark.parametrize("sinks", [None, SINKS], ids=["nosink", "sink"])
@pytest.mark.parametrize("window", [None, 1, 4], ids=["nowindow", "window1", "window4"])
def test_reference_matches_brute_force(causal, sinks, window):
    q, keys, values, query_lens = tiny_batch()
    got = reference_attention(q, keys, values, query_lens, scale=0.7, causal=causal, sinks=sinks, window=window)
    want = brute_force(q, keys, values, query_lens, 0.7, causal, sinks, window)
    assert got.dtype == torch.float32
    assert torch.allclose(got.double(), want, atol=1e-5), (got.double() - want).abs().max()


def test_each_parameter_moves_the_output():
    """A backend that drops any one of them must disagree with the reference."""
    q, keys, values, query_lens = tiny_batch(seed=1)

    def run(**overrides: Any) -> torch.Tensor:
        kwargs: dict[str, Any] = {"scale": 0.7, "causal": True, "sinks": SINKS, "window": 4} | overrides
        return reference_attention(q, keys, values, query_lens, **kwargs)

    base = run()
    for change in ({"scale": 0.7 * 1.02}, {"causal": False}, {"sinks": None}, {"window": None}):
        assert (run(**change) - base).abs().max() > 1e-3, change


def test_bottom_right_mask():
    # 5 keys, the last 2 are queries: query 0 sits at position 3, query 1 at position 4.
    assert visible_keys(5, 2, causal=True, window=None).tolist() == [
        [True, True, True, True, False],
        [True, True, True, True, True],
    ]
    assert visible_keys(5, 2, causal=False, window=None).all()
    # A window counts the query itself: window 2 at position 3 sees keys 2 and 3.
    assert visible_keys(5, 2, causal=True, window=2).tolist() == [
        [False, False, True, True, False],
        [False, False, False, True, True],
    ]
    # Non-causal with a window: symmetric, later keys beyond the window are hidden too
    # (vLLM's definition; a left-only bound agrees only while the queries fit in the window).
    assert visible_keys(5, 2, causal=False, window=2).tolist() == [
        [False, False, True, True, True],
        [False, False, False, True, True],
    ]
    assert visible_keys(6, 4, causal=False, window=2).tolist() == [
        [False, True, True, True, False, False],
        [False, False, True, True, True, False],
        [False, False, False, True, True, True],
        [False, False, False, False, True, True],
    ]


def test_sink_only_adds_to_the_denominator():
    """With one visible key the output is that key's value scaled by 1 / (1 + exp(sink - logit))."""
    q = torch.zeros(1, 1, 2)
    keys = [torch.zeros(1, 1, 2)]
    values = [torch.tensor([[[2.0, -4.0]]])]
    out = reference_attention(q, keys, values, [1], scale=1.0, causal=True, sinks=[0.0], window=None)
    assert torch.allclose(out, torch.tensor([[[1.0, -2.0]]]))


def test_gqa_query_heads_share_kv_heads():
    q = torch.ones(1, 4, 1)
    keys = [torch.zeros(1, 2, 1)]
    values = [torch.tensor([[[10.0], [20.0]]])]
    out = reference_attention(q, keys, values, [1], scale=1.0, causal=True, sinks=None, window=None)
    assert out.flatten().tolist() == [10.0, 10.0, 20.0, 20.0]


def test_mismatched_batch_is_an_error():
    q, keys, values, _ = tiny_batch()
    with pytest.raises(ValueError, match="one entry per request"):
        reference_attention(q, keys, values[:2], (3, 2, 3), scale=1.0, causal=True, sinks=None, window=None)


def test_quantized_rounds_to_nearest_or_toward_zero_with_the_scale():
    from harness.attention.reference import quantized

    x = torch.tensor([0.8477, -0.4336, 1000.0, 0.0])
    # 0.8477 / 0.5 = 1.695: e4m3 neighbours 1.625 and 1.75 (nearest); times 0.5 again.
    assert quantized(x, torch.float8_e4m3fn, 0.5).tolist() == [0.875, -0.4375, 224.0, 0.0]
    assert quantized(x, torch.float8_e4m3fn, 0.5, toward_zero=True).tolist() == [0.8125, -0.40625, 224.0, 0.0]
    assert quantized(x, torch.float8_e5m2, 1.0, toward_zero=True)[:2].tolist() == [0.75, -0.375]


def test_fp8_accumulation_rounds_each_probability_times_256_to_e4m3():
    """Two keys whose logits differ by log(0.3): P = (1, 0.3), and 0.3 * 256 = 76.8 is stored as
    80 (e4m3's step is 8 between 64 and 128), so the second value weighs 0.3125, not 0.3; the
    denominator keeps the unrounded 1.3."""
    from harness.attention.reference import Fp8Accumulation

    query = torch.ones(1, 1, 1)
    keys = [torch.tensor([[[0.0]], [[math.log(0.3)]]])]
    values = [torch.tensor([[[1.0]], [[2.0]]])]
    how = Fp8Accumulation(torch.float8_e4m3fn, tile=32)
    out = reference_attention(
        query, keys, values, [1], scale=1.0, causal=False, sinks=None, window=None, fp8_accumulation=how
    )
    assert float(out) == pytest.approx((1.0 + 0.3125 * 2.0) / 1.3, rel=1e-6)
    exact = reference_attention(query, keys, values, [1], scale=1.0, causal=False, sinks=None, window=None)
    assert float(exact) == pytest.approx((1.0 + 0.3 * 2.0) / 1.3, rel=1e-6)


def test_fp8_accumulation_rounds_against_the_running_maximum_tile_by_tile():
    """Tiles of 2 keys: one pass (the online softmax's running maximum) and one segment per tile
    (split-KV, each segment its own maximum) round the same probabilities against different
    maxima, so they differ; both stay within fp8's relative 2**-4 of the exact result."""
    from harness.attention.reference import Fp8Accumulation

    q, keys, values, lens = tiny_batch(seed=3, dim=8)
    base: dict[str, Any] = dict(scale=1.0, causal=True, sinks=[0.5, -1.0, 0.0, 2.0], window=None)
    exact = reference_attention(q, keys, values, lens, **base)
    one_pass = reference_attention(
        q, keys, values, lens, **base, fp8_accumulation=Fp8Accumulation(torch.float8_e4m3fn, 2)
    )
    split = reference_attention(
        q, keys, values, lens, **base, fp8_accumulation=Fp8Accumulation(torch.float8_e4m3fn, 2, segments=16)
    )
    assert not torch.equal(one_pass, split)
    bound = 2**-4 * max(float(v.abs().max()) for v in values)
    assert float((one_pass - exact).abs().max()) <= bound and float((split - exact).abs().max()) <= bound
    # A sequence inside one tile is one tile and one segment either way.
    whole = Fp8Accumulation(torch.float8_e4m3fn, 64)
    assert torch.equal(
        reference_attention(q, keys, values, lens, **base, fp8_accumulation=whole),
        reference_attention(
            q, keys, values, lens, **base, fp8_accumulation=Fp8Accumulation(torch.float8_e4m3fn, 64, 16)
        ),
    )
