"""One DFlash draft cell, device-agnostic: the cell's VllmConfig, the platform's choice and the
backend's claim, the real draft loader, the backend every draft attention layer carries, one
forward pass of each layer through its backend impl, and the fp32 reference.

What differs between devices enters through ``CellSetup``: the device, how a cell's config is
made, and ``LayerForward`` (eager on the CPU; eager or a replayed CUDA graph on a GPU). The
cpu and gpu lanes both run this one copy. Imports vLLM lazily; only a lane's cell process calls it.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from harness.attention.checkpoint import DraftSpec, DraftTruth
from harness.attention.paged import Batch, Inputs
from harness.matrix import Cell
from harness.observation import Claim, Observation, one_line
from harness.stages import Stage, StageLog

# KV-cache dtypes the reference rounds K and V through: the harness's own reading of the
# cell's kv_cache_dtype axis (vLLM's "fp8" is e4m3 on NVIDIA), never the backend's state.
_KV_REFERENCE_DTYPES = {
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


class DraftSource(Protocol):
    """Per-process state a lane keeps: the checkpoints and one target per dtype."""

    target_path: Path

    def draft(self, spec: DraftSpec) -> DraftTruth: ...

    def target(self, dtype: str, config: Callable[[], Any]) -> Any: ...


class LayerForward(Protocol):
    def refusal(self, attn: Any, attention_config: Any) -> str | None:
        """Why vLLM would not run this layer this way (None: it would)."""
        ...

    def batches(self, batch: Batch) -> tuple[Batch, ...]:
        """The batches this forward runs, given the cell's batch."""
        ...

    def run(
        self,
        attn: Any,
        attention_config: Any,
        runs: Sequence[tuple[Batch, Inputs]],
        causal: bool,
        stage_log: StageLog,
    ) -> list[torch.Tensor]:
        """The layer's output for each (batch, inputs); logs METADATA then FORWARD."""
        ...


ConfigFactory = Callable[[Path, Path, str | None, str], Any]


@dataclass(frozen=True)
class CellSetup:
    device: torch.device
    seed: int
    context_lens: tuple[int, ...]
    query_len: int
    config: ConfigFactory  # (target, draft, requested backend, dtype) -> VllmConfig for this cell
    target_config: Callable[[Path, Path, str], Any]  # (target, draft, dtype) -> the target's own config
    forward: LayerForward


class EagerForward:
    """The layer's backend call, run once on the cell's batch. On a GPU it is synchronised, so
    an asynchronous CUDA error surfaces in the forward stage that caused it, not at the comparison."""

    def __init__(self, device: torch.device):
        self.device = device

    def refusal(self, attn: Any, attention_config: Any) -> str | None:
        return None

    def batches(self, batch: Batch) -> tuple[Batch, ...]:
        return (batch,)

    def run(
        self,
        attn: Any,
        attention_config: Any,
        runs: Sequence[tuple[Batch, Inputs]],
        causal: bool,
        stage_log: StageLog,
    ) -> list[torch.Tensor]:
        from harness.attention.paged import run_eager

        outputs = [run_eager(attn, attention_config, b, i, causal, self.device, stage_log) for b, i in runs]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return outputs


def kv_reference_dtype(kv_cache_dtype: str) -> torch.dtype | None:
    return _KV_REFERENCE_DTYPES.get(kv_cache_dtype)


def draft_attention_config(vllm_config: Any, truth: DraftTruth, requested: str | None) -> Any:
    """The config the draft's attention metadata builders get, as Model Runner V2's DFlash
    speculator makes it (``attn_vllm_config``): the engine's, with the draft's causality and
    backend. FlashInfer's CUDA-graph support depends on ``use_non_causal``."""
    from vllm.config import replace

    config = copy.copy(vllm_config)
    config.attention_config = replace(
        vllm_config.attention_config, use_non_causal=not truth.spec.causal, backend=requested
    )
    return config


def _rounded(tensors: tuple[torch.Tensor, ...], dtype: torch.dtype | None) -> tuple[torch.Tensor, ...]:
    return tensors if dtype is None else tuple(t.to(dtype).float() for t in tensors)


def observe_cell(
    cell: Cell, source: DraftSource, setup: CellSetup, stages: StageLog, tolerance: float | None
) -> Observation:
    """Try one cell; expected refusals are facts, any other exception escapes to the lane.
    ``tolerance`` is the max abs error the layer outputs may show against the reference."""
    from vllm.config import set_current_vllm_config

    from harness.attention import draft as vllm_draft
    from harness.attention.paged import quantizes_query, random_inputs
    from harness.attention.reference import reference_attention

    requested = cell.requested_backend
    dtype_name = str(cell.get("dtype", "bfloat16"))
    dtype = getattr(torch, dtype_name)
    loader = str(cell.get("loader", "v2"))
    kv_cache_dtype = str(cell.get("kv_cache_dtype", "auto"))
    timings: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        timings[name] = round(now - clock, 4)
        clock = now

    stages(Stage.CONFIG)
    truth = source.draft(
        DraftSpec(bool(cell.get("causal")), bool(cell.get("sink")), int(cell.get("sliding_window", 0) or 0))
    )
    details: dict[str, Any] = {"loader": loader, "draft": truth.spec.dirname, "timings_s": timings}
    try:
        config = setup.config(source.target_path, truth.path, requested, dtype_name)
    except ValueError as exc:  # pydantic's ValidationError is one: vLLM refused the config
        return Observation(requested, rejection=(one_line(f"{type(exc).__name__}: {exc}"),), details=details)
    lap("config")

    stages(Stage.SELECT)
    # Under the cell's config: FlashInfer's sink claim reads the current config (and asserts it).
    with set_current_vllm_config(config):
        try:
            choice = vllm_draft.platform_choice(requested, truth, dtype, config)
        except ValueError as exc:
            return Observation(requested, rejection=(one_line(f"{type(exc).__name__}: {exc}"),), details=details)
        # The claim of the backend that was asked for; under auto-selection nobody asked
        # for one, so the claim is that of the backend the platform picked.
        claim = vllm_draft.backend_claim(requested or choice, truth, dtype, config)
    lap("select")

    stages(Stage.BUILD)
    target = source.target(dtype_name, lambda: setup.target_config(source.target_path, truth.path, dtype_name))
    lap("target")
    with set_current_vllm_config(config):
        draft = vllm_draft.load_draft(loader, target, config, setup.device)
        lap("draft")
        layers = vllm_draft.attention_layers(draft.model)
        observed = tuple(vllm_draft.layer_backend(attn) for attn in layers)
        base = Observation(
            requested_backend=requested,
            platform_choice=choice,
            observed_backends=observed,
            claim=claim,
            details=details,
        )
        if any(backend != choice for backend in observed):
            # The request was lost on its way to the layers: that is the verdict, and
            # numbers from a backend nobody selected would be evidence of nothing.
            details["forward"] = f"skipped: draft layers carry {', '.join(observed)}, the platform selects {choice}"
            return base
        vllm_draft.settle_kv_cache(config, layers)
        attention_config = draft_attention_config(config, truth, requested)
        refusals = [why for why in (setup.forward.refusal(attn, attention_config) for attn in layers) if why]
        if refusals:
            # The backend's claim covers the configuration; for a graph cell vLLM's own answer
            # on graphs (the builder's declared CUDA-graph support) is part of it, so a cell
            # refused for graphs is no over-claim.
            reasons = tuple(dict.fromkeys(refusals))
            return dataclasses.replace(
                base, rejection=reasons, claim=Claim(False, (claim.reasons if claim else ()) + reasons)
            )
        batches = setup.forward.batches(Batch(context_lens=setup.context_lens, query_len=setup.query_len))
        shape = truth.shape
        kv_rounding = kv_reference_dtype(kv_cache_dtype)
        per_layer = []
        errors = []
        for index, attn in enumerate(layers):
            runs = [
                (b, random_inputs(b, shape.heads, shape.kv_heads, shape.head_dim, dtype, setup.seed + index + 7919 * k))
                for k, b in enumerate(batches)
            ]
            outputs = setup.forward.run(attn, attention_config, runs, draft.causal[index], stages)
            lap(f"forward_{index}")
            stages(Stage.COMPARE)
            # vLLM's attention layer casts the query to fp8 for such layers (paged.quantizes_query):
            # the reference rounds it the same way, as it rounds K and V for an fp8 cache.
            query_rounding = torch.float8_e4m3fn if quantizes_query(attn) else None
            batch_errors = []
            for (batch, inputs), output in zip(runs, outputs, strict=True):
                expected = reference_attention(
                    _rounded((inputs.query,), query_rounding)[0],
                    _rounded(inputs.keys, kv_rounding),
                    _rounded(inputs.values, kv_rounding),
                    [batch.query_len] * len(batch.context_lens),
                    scale=truth.scale,
                    causal=truth.spec.causal,
                    sinks=truth.layer_sinks(index),
                    window=truth.window,
                )
                batch_errors.append(float((output.float().cpu() - expected).abs().max()))
            lap(f"compare_{index}")
            error = next((e for e in batch_errors if math.isnan(e)), max(batch_errors))
            errors.append(error)
            per_layer.append(
                {
                    "layer": attn.layer_name,
                    "impl": type(attn.impl).__name__,
                    "max_abs_err": error,
                    "batches": [
                        {"context_lens": list(b.context_lens), "max_abs_err": e}
                        for (b, _), e in zip(runs, batch_errors, strict=True)
                    ],
                    "query_quantized": query_rounding is not None,
                }
            )
    details["layers"] = per_layer
    details["kv_cache_layout"] = config.cache_config.kv_cache_layout
    details["block_size"] = config.cache_config.block_size
    # max() would let a NaN from one layer hide behind a finite error of another.
    worst = next((e for e in errors if math.isnan(e)), max(errors))
    return dataclasses.replace(base, max_abs_err=worst, tolerance=tolerance)
