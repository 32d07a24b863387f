"""The loader differential (vLLM #49559: acceptance near 0% on Model Runner V2, normal on V1,
for the same DFlash draft): a loader-v2 cell builds the draft a second time, from the same
checkpoint, through Model Runner V1's loader, and feeds each of its attention layers the
inputs the V2 draft's layer got, through the same forward. The two drafts must then agree:
bit for bit where both layers run the same backend impl, else within the cell's tolerance.

Loader differences the reference comparison cannot see show here: a V2 loader that builds a
layer slightly off (its scale, its sinks, its causality) stays within the reference's
tolerance and still differs from V1 by more than rounding noise, which is zero for one kernel.

Imports vLLM lazily; only the shared cell flow calls it, inside a cell process.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

import torch

from harness.observation import LayerAgreement, LoaderDifferential, one_line
from harness.stages import StageLog

if TYPE_CHECKING:
    from harness.attention.paged import Batch, Inputs

LayerRuns = Sequence[tuple["Batch", "Inputs"]]


class LayerRunner(Protocol):
    """What the differential needs of the cell's forward (cell.LayerForward is one)."""

    def refusal(self, attn: Any, attention_config: Any) -> str | None: ...

    def run(
        self, attn: Any, attention_config: Any, runs: LayerRuns, causal: bool, stage_log: StageLog
    ) -> list[torch.Tensor]: ...


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype and bits (a NaN equals the same NaN; -0.0 differs from 0.0)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


def max_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float().cpu() - b.float().cpu()).abs().max())


def agreement(
    layer: str, v2_impl: str, v1_impl: str, v2: Sequence[torch.Tensor], v1: Sequence[torch.Tensor]
) -> LayerAgreement:
    """One layer's outputs over every batch: bitwise only if every batch is, the worst
    difference over the batches (a NaN in any batch wins, as in the reference comparison)."""
    diffs = [max_abs_diff(a, b) for a, b in zip(v2, v1, strict=True)]
    worst = next((d for d in diffs if math.isnan(d)), max(diffs))
    bitwise = all(bitwise_equal(a, b) for a, b in zip(v2, v1, strict=True))
    return LayerAgreement(layer, v2_impl, v1_impl, bitwise, worst)


def v1_differential(
    config: Any,
    target: Any,
    device: torch.device,
    method: str,
    any_non_causal: bool,
    forward: LayerRunner,
    v2_layers: Sequence[Any],
    v2_runs: Sequence[LayerRuns],
    v2_outputs: Sequence[Sequence[torch.Tensor]],
    stages: StageLog,
) -> LoaderDifferential:
    """Model Runner V1's draft, built under ``config`` (a VllmConfig of its own, made as the
    cell's: layers register in the config they are built under), against the V2 draft's
    layer outputs. Its metadata builders get the config the V2 draft's got
    (``draft_attention_config``: as V2's speculator makes it)."""
    from vllm.config import set_current_vllm_config

    from harness.attention import draft as vllm_draft
    from harness.attention.apis import vllm_apis

    refusal = vllm_apis().missing_for_loader("v1") or vllm_draft.v1_refusal(config)
    if refusal is not None:
        return LoaderDifferential(not_comparable=refusal)
    with set_current_vllm_config(config):
        try:
            twin = vllm_draft.load_draft("v1", target, config, device, method)
        except vllm_draft.LoaderUnavailable as exc:
            return LoaderDifferential(not_comparable=one_line(exc))
        layers = vllm_draft.attention_layers(twin.model)
        vllm_draft.settle_kv_cache(config, layers)
        builders_config = vllm_draft.draft_attention_config(config, any_non_causal)
        refusals = [why for why in (forward.refusal(attn, builders_config) for attn in layers) if why]
        if refusals:
            return LoaderDifferential(not_comparable="V1's draft would not run this way: " + "; ".join(refusals))
        compared = []
        for index, (ours, attn) in enumerate(zip(v2_layers, layers, strict=True)):
            outputs = forward.run(attn, builders_config, v2_runs[index], twin.causal[index], stages)
            compared.append(
                agreement(
                    ours.layer_name, type(ours.impl).__name__, type(attn.impl).__name__, v2_outputs[index], outputs
                )
            )
    return LoaderDifferential(layers=tuple(compared))
