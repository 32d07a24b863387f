"""Build a cell's VllmConfig, load the draft through vLLM's real loaders, and read what
vLLM reports: the backend each draft layer carries, the platform selector's choice for the
request in isolation, and the requested backend's own claim.

Device-agnostic: the lane passes the device and owns everything platform-specific
(distributed init, accelerator patches). Imports vLLM, so only lanes import this module.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from harness.attention import provenance
from harness.attention.apis import ApiUnavailable, config_gap, unregistered_architecture, vllm_apis
from harness.deployment.arguments import Deployment, engine_arguments
from harness.deployment.models import V2_LOADERS, DraftTruth, draft_family
from harness.observation import Claim

LOADERS = ("v1", "v2")


def engine_config(target: Path, draft: Path, deployment: Deployment) -> Any:
    """The VllmConfig an engine would build for ``deployment`` (no engine is started).

    An engine argument this release's config schema lacks (``apis.config_gap``) raises
    ApiUnavailable: the cell is unavailable there, not refused.

    The arguments are ``harness.deployment.arguments.engine_arguments``'s, the ones the finding
    pages print and the repro scripts carry.
    """
    from vllm.engine.arg_utils import EngineArgs

    try:
        # vLLM 0.25.x turns the attention_config dict into AttentionConfig in
        # EngineArgs.__post_init__, 0.24.0 only in create_engine_config: a key the schema lacks is
        # the same gap either way, so both calls are under the check.
        args = EngineArgs(**engine_arguments(deployment, str(target), str(draft)))
        config = args.create_engine_config()
    except ValueError as error:  # pydantic's ValidationError is one
        if (gap := config_gap(error) or unregistered_architecture(error)) is not None:
            raise ApiUnavailable(gap) from None
        raise
    device = deployment.settings.device
    return config if device is None else on_device(config, device)


def on_device(vllm_config: Any, device: str) -> Any:
    """Put the config's model on ``device``: DeviceConfig takes the platform's device type at
    creation, and BaseModelLoader prefers ``load_config.device`` over ``device_config.device``."""
    vllm_config.device_config.device = torch.device(device)
    vllm_config.device_config.device_type = device
    vllm_config.load_config.device = device
    return vllm_config


def draft_attention_config(vllm_config: Any, any_non_causal: bool) -> Any:
    """The config the draft's attention metadata builders get, made by the release's own Model
    Runner V2 DFlash speculator (``DFlashSpeculator.attn_vllm_config``, which DFlash2 and DSpark
    inherit): from 0.26.0 the engine's config with the draft's causality (``use_non_causal``:
    FlashInfer's CUDA-graph support depends on it); from 0.34.0 also the draft's own
    ``speculative_config`` overrides (``_DRAFT_VLLM_CONFIG_OVERRIDES``: attention backend, KV-cache
    dtype, MoE backend). The property reads three attributes its ``__init__`` sets from the
    engine's config; the rest of that ``__init__`` allocates device buffers, so the speculator
    is made without it. A release without the property (0.24.0, 0.25.x) hands its builders the
    engine's config as it is (``DraftModelSpeculator.set_attn``)."""
    try:
        from vllm.v1.worker.gpu.spec_decode.dflash.speculator import DFlashSpeculator
    except ImportError:
        return copy.copy(vllm_config)
    made_by = getattr(DFlashSpeculator, "attn_vllm_config", None)
    if not isinstance(made_by, property) or made_by.fget is None:
        return copy.copy(vllm_config)
    speculator = object.__new__(DFlashSpeculator)
    speculator.vllm_config = vllm_config
    speculator.speculative_config = vllm_config.speculative_config
    speculator.requires_non_causal = any_non_causal
    return made_by.fget(speculator)


def init_single_process_group(root: Path, backend: str) -> None:
    """vLLM's model code asks for tensor- and pipeline-parallel groups even in one process:
    a world of one, rendezvous through a file under ``root``. Once per process."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import ensure_model_parallel_initialized, init_distributed_environment

    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1,
            rank=0,
            distributed_init_method=f"file://{root / 'dist-init'}",
            local_rank=0,
            backend=backend,
        )
        ensure_model_parallel_initialized(1, 1)


def load_target(vllm_config: Any) -> nn.Module:
    """Build the target under its own config: layers register in the config they are built
    under, and a second model under one config fails with "Duplicate layer name"."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader import get_model

    with set_current_vllm_config(vllm_config):
        return get_model(vllm_config=vllm_config)


@dataclass(frozen=True)
class DraftBuild:
    """What the loader handed vLLM's ``get_model`` for the draft: the VllmConfig it is built
    under, its ModelConfig and the LoadConfig it is loaded with (the draft's effective config)."""

    vllm_config: Any
    model_config: Any
    load_config: Any


@dataclass(frozen=True)
class LoadedDraft:
    """The draft model and the causal flag each layer's metadata gets from its runner; for
    loader v1, the ``DFlashProposer`` that loaded it (its attention groups are its own); and the
    config the loader built it under (None where the loader never called ``get_model``)."""

    model: nn.Module
    causal: tuple[bool, ...]
    proposer: Any = None
    build: DraftBuild | None = None


@contextmanager
def recording_builds() -> Iterator[list[DraftBuild]]:
    """Record every ``get_model`` call vLLM makes while open. The loaders derive the draft's
    config inside themselves and keep no reference to it (``load_dflash_model``'s
    ``draft_vllm_config``, ``_create_draft_vllm_config``), so the call is the one place to read
    it. Every module that imported ``get_model`` by name is pointed at the recorder (a loader
    imports it at module level or at call time)."""
    from vllm.model_executor import model_loader

    original = model_loader.get_model
    builds: list[DraftBuild] = []

    @functools.wraps(original)
    def recording(*args: Any, **kwargs: Any) -> Any:
        vllm_config = kwargs["vllm_config"]
        model_config = kwargs.get("model_config") or vllm_config.model_config
        builds.append(DraftBuild(vllm_config, model_config, kwargs.get("load_config") or vllm_config.load_config))
        return original(*args, **kwargs)

    # The module's own dict, not getattr: a lazy module's __getattr__ would import what it guards (transformers'
    # lazy modules import torchvision for an unknown name).
    holders = [m for m in list(sys.modules.values()) if getattr(m, "__dict__", {}).get("get_model") is original]
    for module in holders:
        module.get_model = recording  # type: ignore[attr-defined]
    try:
        yield builds
    finally:
        for module in holders:
            module.get_model = original  # type: ignore[attr-defined]


class LoaderUnavailable(Exception):
    """This vLLM has no loader (or no model) for the draft's method: the cell is unavailable."""


def v1_refusal(vllm_config: Any) -> str | None:
    """Model Runner V1's own refusal of this config, in vLLM's words (``VllmConfig.
    _validate_v1_model_runner``): dspark, DFlash candidate-head (dflash2) and mixed sliding/full
    drafts are V2-only in vLLM 0.33.0. None where V1 would run it or the release has no list."""
    features = getattr(vllm_config, "_get_v1_model_runner_unsupported_features", None)
    unsupported = features() if features is not None else []
    return f"Model Runner V1 does not support: {', '.join(unsupported)}" if unsupported else None


def _v2_loader(method: str) -> Any:
    """Model Runner V2's loader for the method's family (``harness.deployment.models.V2_LOADERS``)."""
    module, function = V2_LOADERS[draft_family(method)]
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError) as exc:  # AttributeError: `from module import function` fails
        raise LoaderUnavailable(f"no Model Runner V2 loader for {method}: {exc}") from exc


def load_draft(
    loader: str, target: nn.Module, vllm_config: Any, device: torch.device, method: str = "dflash"
) -> LoadedDraft:
    """Call the real draft loader. The caller holds ``set_current_vllm_config(vllm_config)``.

    v2: the method's Model Runner V2 loader (``load_dflash_model``, the loader PR #46770 fixed,
        or ``load_dspark_model``); its speculator builds metadata with the causal flags
        ``VllmApis.v2_draft_causal`` reads the way this release does (per layer from 0.26 on).
    v1: ``DFlashProposer.load_model`` (Model Runner V1, ``SpecDecodeBaseProposer._get_model``),
        the path ``vllm.LLM`` takes wherever V2 is unavailable (CPU has no Triton); its
        metadata carries one flag for all layers, ``dflash_causal``. V1 has no proposer for
        dspark; ask ``v1_refusal`` first.
    """
    if loader == "v2":
        load = _v2_loader(method)
        with recording_builds() as builds:
            model: nn.Module = load(target, vllm_config)
        return LoadedDraft(model, vllm_apis().v2_draft_causal(model, vllm_config), build=_last(builds))
    if loader == "v1":
        if draft_family(method) == "dspark":
            raise LoaderUnavailable("Model Runner V1 has no DSpark proposer")
        from vllm.v1.spec_decode.dflash import DFlashProposer

        proposer = DFlashProposer(vllm_config, device)
        with recording_builds() as builds:
            proposer.load_model(target)
        layers = len(proposer.model.model.layers)
        return LoadedDraft(proposer.model, (bool(proposer.dflash_causal),) * layers, proposer, _last(builds))
    raise ValueError(f"unknown loader {loader!r} (valid: {', '.join(LOADERS)})")


def _last(builds: list[DraftBuild]) -> DraftBuild | None:
    return builds[-1] if builds else None


def attention_layers(draft: nn.Module) -> list[Any]:
    """The draft's attention layers in checkpoint order (draft layer i = ``layers.i``)."""
    return [layer.self_attn.attn for layer in draft.model.layers]


def platform_name() -> str:
    from vllm.platforms import current_platform

    return type(current_platform).__name__


def layer_backend(attn: Any) -> str:
    name: str = attn.get_attn_backend().get_name()
    return name


def selector_block_size(cache_config: Any) -> int | None:
    """The block size the selector asks backends about: the user's, or None (vLLM 0.33.0
    ``get_attn_backend``: ``cache_config.block_size`` only when ``user_specified_block_size``)."""
    user_specified = getattr(cache_config, "user_specified_block_size", True)
    return cache_config.block_size if user_specified else None


def draft_cache_dtype(vllm_config: Any) -> str:
    """The KV-cache dtype the draft's layers should get: speculative_config.kv_cache_dtype
    when set (both loaders put it in the draft's cache_config), else the target's."""
    spec = vllm_config.speculative_config
    chosen = getattr(spec, "kv_cache_dtype", None) if spec is not None else None
    return str(chosen if chosen is not None else vllm_config.cache_config.cache_dtype)


def layer_kv_cache_dtype(attn: Any) -> str:
    return str(attn.kv_cache_dtype)


def _selector_config(truth: DraftTruth, dtype: torch.dtype, vllm_config: Any, layer: int | None = None) -> Any:
    """What the selector sees for a draft layer (``layer``; None = the draft as a whole: any
    windowed layer, any non-causal layer, as the loader's ``use_non_causal`` says)."""
    from vllm.v1.attention.selector import AttentionSelectorConfig

    windowed = (
        any(truth.layer_window(i) for i in range(truth.shape.draft_layers))
        if layer is None
        else bool(truth.layer_window(layer))
    )
    return AttentionSelectorConfig(
        head_size=truth.shape.head_dim,
        dtype=dtype,
        kv_cache_dtype=draft_cache_dtype(vllm_config),
        block_size=selector_block_size(vllm_config.cache_config),
        has_sink=truth.spec.sink,
        has_sliding_window=windowed,
        use_non_causal=truth.any_non_causal,
    )


def platform_choice(
    requested: str | None, truth: DraftTruth, dtype: torch.dtype, vllm_config: Any, layer: int | None = None
) -> str:
    """What the platform's own selector returns for this request, asked directly rather than
    through any loader, so a loader that drops the request shows up as a different backend.
    A clean refusal escapes as vLLM's ValueError. ``layer``: for that draft layer's window."""
    from vllm.platforms import current_platform
    from vllm.utils.import_utils import resolve_obj_by_qualname
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    selected = AttentionBackendEnum[requested] if requested is not None else None
    path = current_platform.get_attn_backend_cls(
        selected, attn_selector_config=_selector_config(truth, dtype, vllm_config, layer), num_heads=truth.shape.heads
    )
    name: str = resolve_obj_by_qualname(path).get_name()
    return name


def backend_claim(backend: str, truth: DraftTruth, dtype: torch.dtype, vllm_config: Any) -> Claim:
    """The backend's own word on this configuration.

    ``validate_configuration`` folds in ``supports_sink``, ``supports_non_causal`` and
    ``supports_sliding_window``. On a platform without a device capability (CPU) some
    backends' capability check raises TypeError (FLASH_ATTN compares it with 8.0); their
    claim is then assembled from the per-feature methods ``validate_configuration`` calls,
    leaving out only the capability check this platform cannot answer.
    """
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    try:
        backend_class = AttentionBackendEnum[backend].get_class()
    except (ImportError, OSError) as exc:
        return Claim(False, (f"backend class does not import here: {type(exc).__name__}: {exc}",))
    selector = _selector_config(truth, dtype, vllm_config)
    capability = current_platform.get_device_capability()
    try:
        reasons = backend_class.validate_configuration(device_capability=capability, **selector._asdict())
    except TypeError:
        if capability is not None:
            raise
        reasons = _feature_reasons(backend_class, selector)
    return Claim(not reasons, tuple(str(r) for r in reasons))


def _feature_reasons(backend_class: Any, selector: Any) -> list[str]:
    checks = (
        (backend_class.supports_head_size(selector.head_size), "head_size not supported"),
        (backend_class.supports_dtype(selector.dtype), "dtype not supported"),
        (backend_class.supports_kv_cache_dtype(selector.kv_cache_dtype), "kv_cache_dtype not supported"),
        (backend_class.supports_block_size(selector.block_size), "block_size not supported"),
        (not selector.has_sink or backend_class.supports_sink(), "attention sinks not supported"),
        (
            not selector.has_sliding_window or backend_class.supports_sliding_window(),
            "sliding window not supported",
        ),
        (not selector.use_non_causal or backend_class.supports_non_causal(), "non-causal attention not supported"),
    )
    return [reason for ok, reason in checks if not ok]


def settle_kv_cache(vllm_config: Any, layers: list[Any]) -> None:
    """What the engine decides between loading the model and allocating its KV cache, for the
    attention layers given (the draft's where the cell's config holds no others; the selection
    lane passes target and draft layers together):

    - the block size, where the user left it to vLLM: the executor calls
      ``current_platform.update_block_size_for_backend`` right after ``load_model``
      (vLLM 0.33.0 ``v1/executor/uniproc_executor.py``), which sizes it for the backends the
      layers carry;
    - the KV-cache layout: the engine core resolves it once from the layouts every worker's
      backends support (``v1/engine/core.py`` -> ``resolve_kv_cache_layout``, fed by
      ``WorkerBase.get_supported_kv_cache_layouts``) and records it on ``cache_config``.
      FlashInfer's builder reads it from there and raises "KV cache layout has not been
      resolved yet" until it is recorded; the harness allocates its cache in that layout.

    The caller holds ``set_current_vllm_config(vllm_config)``.
    """
    from vllm.platforms import current_platform
    from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout

    current_platform.update_block_size_for_backend(vllm_config)
    backends = list({attn.get_attn_backend(): None for attn in layers})
    supported = [layout.name for layout in get_supported_kv_cache_layouts(backends)]
    specs = [attn.get_kv_cache_spec(vllm_config) for attn in layers]
    resolve_kv_cache_layout(vllm_config, [supported], specs)


def asked_draft_config(target_config: Any, overrides: tuple[provenance.Override, ...]) -> Any:
    """The config vLLM documents giving the draft (``provenance.documented_overrides`` on the
    target's), registering nothing: a shallow copy with copies of the sections it changes and a
    compilation config whose layer registry is empty, so a reference layer built under it
    reaches neither the target's nor the draft's KV cache. An override's value is the raw one
    from the speculative config (``provenance.OVERRIDE_SOURCES``), the plain copy only text."""
    speculative = target_config.speculative_config
    asked = copy.copy(target_config)
    for section in {override.key.split(".", 1)[0] for override in overrides} | {"compilation_config"}:
        setattr(asked, section, copy.copy(getattr(target_config, section)))
    for override in overrides:
        section, name = override.key.split(".", 1)
        source = provenance.OVERRIDE_SOURCES.get(override.key)
        setattr(getattr(asked, section), name, override.value if source is None else getattr(speculative, source))
    asked.compilation_config.static_forward_context = {}
    return asked


def reference_layer(attn: Any, truth: DraftTruth, index: int, asked_config: Any, dtype: torch.dtype) -> Any:
    """vLLM's own attention layer for what draft layer ``index`` asked (its checkpoint's heads,
    head size, scale, per-layer window and sinks; its quant config: none), of the draft layer's
    own class, on the backend it carries (the backend is judged by the verdict, not here) and
    with its attention type (the model class decides it from the draft's own checkpoint), built
    and post-processed the way ``get_model`` builds and post-processes the draft's, under
    ``asked_config`` (``asked_draft_config``) in the draft's model dtype."""
    from vllm.config import set_current_vllm_config

    shape = truth.shape
    extra: dict[str, Any] = {}
    if truth.spec.sink:
        extra["sinks"] = torch.zeros(shape.heads, dtype=torch.float32)
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with set_current_vllm_config(asked_config):
            reference = type(attn)(
                shape.heads,
                shape.head_dim,
                truth.scale,
                num_kv_heads=shape.kv_heads,
                cache_config=asked_config.cache_config,
                quant_config=None,
                per_layer_sliding_window=truth.layer_window(index) or None,
                prefix=f"provenance-reference.{attn.layer_name}",
                attn_type=attn.attn_type,
                attn_backend=attn.attn_backend,
                **extra,
            )
            finish = getattr(reference, "process_weights_after_loading", None)
            if finish is not None:
                # vLLM 0.33.0's loader passes the model dtype (model_loader/utils.py), 0.34.0's
                # finalize_model_weights nothing (the layer keeps its act_dtype).
                finish(*((dtype,) if inspect.signature(finish).parameters else ()))
            reference.eval()  # BaseModelLoader.load_model returns model.eval()
    finally:
        torch.set_default_dtype(before)
    return reference


def layer_provenance(
    modules: list[tuple[str, Any]], truth: DraftTruth, asked_config: Any, dtype: torch.dtype
) -> tuple[provenance.LayerProvenance, ...]:
    """Each draft attention layer's and impl's attributes beside its reference's; a reference
    vLLM does not build here is recorded with why (the audit lists that layer as not judged)."""
    layers = []
    for index, (name, attn) in enumerate(modules):
        own = provenance.read(attn)
        own_impl = provenance.read(attn.impl)
        try:
            reference = reference_layer(attn, truth, index, asked_config, dtype)
        except Exception as error:  # a release whose Attention takes other arguments: not judged, said so
            why = f"vLLM did not build it: {type(error).__name__}: {str(error)[:200]}"
            layers.append(provenance.LayerProvenance(name, own, own_impl, why=why))
            continue
        layers.append(
            provenance.LayerProvenance(name, own, own_impl, provenance.read(reference), provenance.read(reference.impl))
        )
    return tuple(layers)
