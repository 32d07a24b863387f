"""One DFlash draft cell, device-agnostic: the cell's VllmConfig, the platform's choice and the
backend's claim, the real draft loader, the backend every draft attention layer carries, one
forward pass of each layer through its backend impl, and the fp32 reference; a loader-v2 cell
also builds Model Runner V1's draft of the same checkpoint and compares the two (differential.py).

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
from harness.attention.differential import v1_differential
from harness.attention.draft import EngineShape
from harness.attention.paged import Batch, Inputs
from harness.axes import DRAFT_LAYER_KINDS, LONG_CONTEXT_LENS, TARGET_KIND_PREFIX
from harness.matrix import Cell
from harness.observation import Claim, Observation, one_line
from harness.stages import Stage, StageLog

# KV-cache dtypes the reference rounds K and V through: the harness's own reading of the
# cell's kv_cache_dtype axis (vLLM's "fp8" is e4m3 on NVIDIA), never the backend's state.
_KV_REFERENCE_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


class DraftSource(Protocol):
    """Per-process state a lane keeps: the checkpoints and one target per dtype."""

    target_path: Path

    def draft(self, spec: DraftSpec, head_size: int | None) -> DraftTruth:
        """The draft checkpoint for ``spec`` with that head size (None: the lane's own)."""
        ...

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
    context_lens: tuple[int, ...]  # per request, already chosen for the cell's context axis
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
        vllm_config.attention_config, use_non_causal=truth.any_non_causal, backend=requested
    )
    return config


# context = "long": contexts past the kernels' split-KV / multi-tile thresholds.
# - TRITON_ATTN (vLLM 0.33.0, triton_unified_attention.py) takes its 3D split-KV path (16
#   softmax segments, NUM_PAR_SOFTMAX_SEGMENTS) only for causal batches of at most 8 query
#   tokens per request (MAX_3D_QUERY_LEN) and num_seqs * cdiv(q, BLOCK_Q) <= seq_threshold_3D
#   (MIN_LAUNCH_GRID_SIZE_2D // kv heads); non-causal DFlash queries always run the 2D kernel.
# - CPU_ATTN (csrc/cpu/cpu_attn_impl.hpp) walks the KV in L2-sized tiles (online softmax across
#   tiles, where a sink counted per tile would show); it splits one request's KV across threads
#   only for a 1-token query tile (split_kv_q_token_num_threshold = 1, VLLM_CPU_ATTN_SPLIT_KV=1)
#   and with more than one OpenMP thread: DFlash's 5-token queries never take that path.
# LONG_CONTEXT_LENS (harness.axes): 1500 and 600 tokens are several KV tiles for every head
# size here; 3 keeps one short request.


def context_lens(cell: Cell, short: tuple[int, ...]) -> tuple[int, ...]:
    return LONG_CONTEXT_LENS if cell.get("context", "short") == "long" else short


def engine_shape(cell: Cell, base: EngineShape | None = None) -> EngineShape:
    """The engine settings a cell asks for: its KV dtypes, the target's attention, the method,
    and a model length that holds its contexts. A target left to auto keeps ``base``'s (a
    lane option, e.g. the selection lane's ``target_backend``)."""
    base = base or EngineShape()
    target = str(cell.get("target_attention", "auto"))
    draft_kv = str(cell.get("draft_kv_cache_dtype", "target"))
    per_kind: tuple[tuple[str, str], ...] = ()
    target_backend = base.target_backend
    if target.startswith(TARGET_KIND_PREFIX):
        per_kind = tuple((kind, target.removeprefix(TARGET_KIND_PREFIX)) for kind in DRAFT_LAYER_KINDS)
        target_backend = None
    elif target != "auto":
        target_backend = target
    longest = max(context_lens(cell, ()) or (0,))
    return dataclasses.replace(
        base,
        kv_cache_dtype=str(cell.get("kv_cache_dtype", "auto")),
        draft_kv_cache_dtype=None if draft_kv == "target" else draft_kv,
        target_backend=target_backend,
        target_backend_per_kind=per_kind,
        method=str(cell.get("method", "dflash")),
        max_model_len=max(base.max_model_len, longest + 256),
    )


def draft_spec(cell: Cell) -> tuple[DraftSpec, int | None]:
    """The draft a cell asks for: its family member, attention features and head size
    (None when the matrix does not vary it)."""
    spec = DraftSpec(
        causal=bool(cell.get("causal")),
        sink=bool(cell.get("sink")),
        sliding_window=int(cell.get("sliding_window", 0) or 0),
        method=str(cell.get("method", "dflash")),
        layers=str(cell.get("layers", "uniform")),
    )
    head_size = cell.get("head_size")
    return spec, None if head_size is None else int(head_size)


def _rounded(tensors: tuple[torch.Tensor, ...], dtype: torch.dtype | None) -> tuple[torch.Tensor, ...]:
    return tensors if dtype is None else tuple(t.to(dtype).float() for t in tensors)


def observe_cell(
    cell: Cell, source: DraftSource, setup: CellSetup, stages: StageLog, tolerance: float | None
) -> Observation:
    """Try one cell; expected refusals are facts, any other exception escapes to the lane.
    ``tolerance`` is the max abs error the layer outputs may show against the reference."""
    from vllm.config import set_current_vllm_config

    from harness.attention import draft as vllm_draft
    from harness.attention.apis import ApiUnavailable, vllm_apis
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
    # A release without an entry point this flow calls (or without the requested backend) is
    # unavailable here, as in every lane, never a crash blamed on the backend.
    missing = vllm_apis().missing_for_draft_cell(loader, requested)
    if missing is not None:
        return Observation(requested, unavailable=missing, details={"loader": loader})
    spec, head_size = draft_spec(cell)
    truth = source.draft(spec, head_size)
    shape = truth.shape
    details: dict[str, Any] = {"loader": loader, "draft": truth.path.name, "timings_s": timings}
    try:
        config = setup.config(source.target_path, truth.path, requested, dtype_name)
    except ApiUnavailable as why:
        return Observation(requested, unavailable=str(why), details=details)
    except ValueError as exc:  # pydantic's ValidationError is one: vLLM refused the config
        return Observation(requested, rejection=(one_line(f"{type(exc).__name__}: {exc}"),), details=details)
    lap("config")
    if loader == "v1" and (refusal := vllm_draft.v1_refusal(config)) is not None:
        return Observation(requested, rejection=(refusal,), details=details)

    stages(Stage.SELECT)
    layer_count = truth.shape.draft_layers
    # Under the cell's config: FlashInfer's sink claim reads the current config (and asserts it).
    with set_current_vllm_config(config):
        try:
            # Per layer: a windowed and a full layer of one hybrid draft are selected apart.
            choices = tuple(
                vllm_draft.platform_choice(requested, truth, dtype, config, layer) for layer in range(layer_count)
            )
        except ValueError as exc:
            return Observation(requested, rejection=(one_line(f"{type(exc).__name__}: {exc}"),), details=details)
        # The claim of the backend that was asked for; under auto-selection nobody asked
        # for one, so the claim is that of the backend the platform picked.
        claim = vllm_draft.backend_claim(requested or choices[0], truth, dtype, config)
    lap("select")

    stages(Stage.BUILD)
    target = source.target(dtype_name, lambda: setup.target_config(source.target_path, truth.path, dtype_name))
    lap("target")
    with set_current_vllm_config(config):
        try:
            draft = vllm_draft.load_draft(loader, target, config, setup.device, spec.method)
        except vllm_draft.LoaderUnavailable as exc:
            return Observation(requested, unavailable=one_line(exc), details=details)
        lap("draft")
        layers = vllm_draft.attention_layers(draft.model)
        observed = tuple(vllm_draft.layer_backend(attn) for attn in layers)
        wanted_kv = vllm_draft.draft_cache_dtype(config)
        lost = tuple(
            f"{attn.layer_name} has kv_cache_dtype {got}, the draft asked for {wanted_kv}"
            for attn in layers
            if (got := vllm_draft.layer_kv_cache_dtype(attn)) != wanted_kv
        )
        base = Observation(
            requested_backend=requested,
            platform_choice=choices[0],
            layer_choices=choices if len(set(choices)) > 1 else (),
            observed_backends=observed,
            lost_settings=lost,
            claim=claim,
            details=details,
        )
        if lost or any(backend != choice for backend, choice in zip(observed, choices, strict=True)):
            # The request was lost on its way to the layers: that is the verdict, and
            # numbers from a backend nobody selected would be evidence of nothing.
            details["forward"] = f"skipped: draft layers carry {', '.join(observed)}, the platform selects " + (
                ", ".join(choices)
            )
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
        kv_rounding = kv_reference_dtype(wanted_kv if wanted_kv != "auto" else kv_cache_dtype)
        per_layer = []
        errors = []
        layer_runs, layer_outputs = [], []
        for index, attn in enumerate(layers):
            runs = [
                (b, random_inputs(b, shape.heads, shape.kv_heads, shape.head_dim, dtype, setup.seed + index + 7919 * k))
                for k, b in enumerate(batches)
            ]
            outputs = setup.forward.run(attn, attention_config, runs, draft.causal[index], stages)
            layer_runs.append(runs)
            layer_outputs.append(outputs)
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
                    causal=truth.layer_causal(index),
                    sinks=truth.layer_sinks(index),
                    window=truth.layer_window(index),
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
    differential = None
    if loader == "v2":
        stages(Stage.BUILD)
        differential = v1_differential(
            setup.config(source.target_path, truth.path, requested, dtype_name),
            target,
            setup.device,
            spec.method,
            lambda v1_config: draft_attention_config(v1_config, truth, requested),
            setup.forward,
            layers,
            layer_runs,
            layer_outputs,
            stages,
        )
        lap("loader_differential")
    # max() would let a NaN from one layer hide behind a finite error of another.
    worst = next((e for e in errors if math.isnan(e)), max(errors))
    return dataclasses.replace(base, max_abs_err=worst, tolerance=tolerance, loader_differential=differential)
