"""The vLLM entry points the lanes call, resolved once per cell process.

vLLM moves and renames internals between releases. A lane asks here, before it calls into
vLLM, whether this release has what a cell needs: a release without an entry point makes the
cell ``unavailable`` with the missing name and the import error, in every lane, never a
``crash`` that reads like a bug of the backend under test. vLLM (and torch) are imported only
when ``vllm_apis()`` is first called, in a cell process, after the lane set its platform up.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.observation import one_line

# Where Model Runner V2's DFlash speculator reads a causal flag for all draft layers when the
# model has no per-layer ``get_draft_attn_causal()``: vLLM >= 0.26 (``dflash/speculator.py``:
# ``not dflash_has_any_non_causal(hf_config)``), and vLLM 0.24-0.25, whose speculator knows one
# flag only (``get_dflash_causal(draft_model_config)``, ``dflash_config.causal``, default False).
_ANY_NON_CAUSAL = "vllm.model_executor.models.qwen3_dflash.dflash_has_any_non_causal"
_DRAFT_CAUSAL = "vllm.v1.worker.gpu.spec_decode.dflash.utils.get_dflash_causal"

# What running a draft layer's kernels against the reference needs besides (cpu and gpu lanes).
_FORWARD = (
    "vllm.model_executor.model_loader.get_model",
    "vllm.config.replace",
)


class ApiUnavailable(Exception):
    """The backend, or an API the lane needs, does not exist in this vLLM release."""


# pydantic error types for an argument, or a value of a fixed choice, that a release's config
# schema does not have (vLLM 0.24.0: no attention_config.backend_per_kind, no
# speculative_config.kv_cache_dtype, no "dspark" method), as opposed to a value it refuses.
_SCHEMA_GAPS = frozenset({"unexpected_keyword_argument", "extra_forbidden", "literal_error"})


# SpeculativeConfig's check of the draft checkpoint's architecture against the model registry
# (vllm/config/model.py, "... are not supported for now"): a release that registers no model class
# for a method's draft (DFlash2DraftModel before 0.28.0) has no such deployment at all.
_UNREGISTERED = re.compile(r"Model architectures \[([^\]]*)\] are not supported for now")


def config_gap(error: Exception) -> str | None:
    """Why vLLM's config schema cannot take a cell's engine arguments in this release, when
    every error pydantic reports is of that kind (None: a real refusal, or no pydantic error)."""
    errors = getattr(error, "errors", None)
    if not callable(errors):
        return None
    found = errors()
    if not found or any(e.get("type") not in _SCHEMA_GAPS for e in found):
        return None
    title = getattr(error, "title", "config")
    fields = dict.fromkeys(".".join(str(part) for part in e.get("loc", ())) for e in found)
    inputs = dict.fromkeys(repr(e.get("input"))[:80] for e in found)
    return f"this vLLM release's {title} has no {', '.join(fields)} taking {', '.join(inputs)}"


def unregistered_architecture(error: Exception) -> str | None:
    """Why the release cannot build the draft at all: its model registry has no class for the
    draft checkpoint's architecture (None: any other error)."""
    found = _UNREGISTERED.search(str(error))
    if found is None:
        return None
    return f"this vLLM release registers no model class for the draft's architecture {found.group(1)}"


def unregistered_draft(architecture: str) -> str | None:
    """Why the release cannot build a draft of ``architecture`` at all, asked of its model registry
    before any config is built (None: registered). A class a release lacks may also make its config
    unreadable first (vLLM 0.33.0's transformers has no mistral_large4_text config), which would read
    as a refusal of the config rather than as the absent class it is."""
    from vllm.model_executor.models.registry import ModelRegistry

    if architecture in ModelRegistry.get_supported_archs():
        return None
    return f"this vLLM release registers no model class for the draft's architecture '{architecture}'"


def unaccepted_cache_dtype(asked: Mapping[str, str | None], accepted: tuple[str, ...] | None) -> str | None:
    """Why the release cannot take a KV-cache dtype the cell names: its ``CacheDType``
    (vllm/config/cache.py) does not list it. ``asked`` maps the engine argument (the target's
    ``kv_cache_dtype``, the speculative config's ``kv_cache_dtype``) to its value, None where the
    cell leaves it unset; ``accepted`` is None where the release has no ``CacheDType`` to read,
    and then nothing is decided here (the config schema still answers, ``config_gap``)."""
    if accepted is None:
        return None
    unknown = [
        f"{argument}={value!r}" for argument, value in asked.items() if value is not None and value not in accepted
    ]
    if not unknown:
        return None
    return f"this vLLM release's CacheDType has no {', '.join(unknown)} (it lists {len(accepted)} KV-cache dtypes)"


@dataclass
class VllmApis:
    """The vLLM entry points the lanes use, resolved once; a release without one says so."""

    torch: Any
    enum: Any
    selector_config: Any
    set_current_vllm_config: Any
    vllm_config: Any
    engine_args: Any
    attention_layer_base: Any
    resolve: Any
    any_non_causal: Any
    draft_causal: Any
    missing: dict[str, str]
    # The values of the release's vllm.config.cache.CacheDType; None where it has none.
    cache_dtypes: tuple[str, ...] | None = None
    # vllm.v1.attention.backends.fa_utils.get_flash_attn_version; None where the release has none.
    flash_attn_version: Any = None

    @classmethod
    def load(cls) -> VllmApis:
        missing: dict[str, str] = {}

        def find(module: str, attr: str) -> Any:
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as error:
                missing[f"{module}.{attr}"] = f"{type(error).__name__}: {one_line(error, 200)}"
                return None

        import torch

        apis = cls(
            torch=torch,
            enum=find("vllm.v1.attention.backends.registry", "AttentionBackendEnum"),
            selector_config=find("vllm.v1.attention.selector", "AttentionSelectorConfig"),
            set_current_vllm_config=find("vllm.config", "set_current_vllm_config"),
            vllm_config=find("vllm.config", "VllmConfig"),
            engine_args=find("vllm.engine.arg_utils", "EngineArgs"),
            attention_layer_base=find("vllm.model_executor.layers.attention_layer_base", "AttentionLayerBase"),
            resolve=find("vllm.utils.import_utils", "resolve_obj_by_qualname"),
            any_non_causal=find(*_ANY_NON_CAUSAL.rsplit(".", 1)),
            draft_causal=find(*_DRAFT_CAUSAL.rsplit(".", 1)),
            missing=missing,
        )
        cache_dtype = find("vllm.config.cache", "CacheDType")
        apis.cache_dtypes = None if cache_dtype is None else tuple(str(v) for v in typing.get_args(cache_dtype))
        apis.flash_attn_version = find("vllm.v1.attention.backends.fa_utils", "get_flash_attn_version")
        # Import the loaders now, so their imports are frozen with the rest and a missing
        # one is known before the first cell.
        find("vllm.v1.worker.gpu.spec_decode.dflash.utils", "load_dflash_model")
        find("vllm.v1.spec_decode.dflash", "DFlashProposer")
        # What harness.attention.draft.init_single_process_group calls.
        find("vllm.distributed", "init_distributed_environment")
        find("vllm.distributed", "ensure_model_parallel_initialized")
        for name in _FORWARD:
            find(*name.rsplit(".", 1))
        return apis

    def _missing(self, names: tuple[str, ...]) -> str | None:
        gaps = [name for name in names if name in self.missing]
        if not gaps:
            return None
        return "this vLLM release lacks " + "; ".join(f"{name} ({self.missing[name]})" for name in gaps)

    def missing_for_selection(self) -> str | None:
        return self._missing(
            (
                "vllm.v1.attention.backends.registry.AttentionBackendEnum",
                "vllm.v1.attention.selector.AttentionSelectorConfig",
                "vllm.config.set_current_vllm_config",
                "vllm.config.VllmConfig",
                "vllm.utils.import_utils.resolve_obj_by_qualname",
            )
        )

    def missing_for_loader(self, loader: str) -> str | None:
        common = (
            "vllm.engine.arg_utils.EngineArgs",
            "vllm.distributed.init_distributed_environment",
            "vllm.distributed.ensure_model_parallel_initialized",
            "vllm.model_executor.layers.attention_layer_base.AttentionLayerBase",
        )
        if loader != "v2":
            return self._missing((*common, "vllm.v1.spec_decode.dflash.DFlashProposer"))
        missing = self._missing((*common, "vllm.v1.worker.gpu.spec_decode.dflash.utils.load_dflash_model"))
        if missing is None and self.any_non_causal is None and self.draft_causal is None:
            # Either one will do (a release has one of them); name both.
            return self._missing((_ANY_NON_CAUSAL, _DRAFT_CAUSAL))
        return missing

    def v2_draft_causal(self, model: Any, vllm_config: Any) -> tuple[bool, ...]:
        """Each draft layer's causal flag as this release's Model Runner V2 speculator sets it.

        vLLM >= 0.26 gives every layer its own flag from the model's ``get_draft_attn_causal()``
        where the model has one, else one flag for all: ``not dflash_has_any_non_causal``.
        vLLM 0.24-0.25 have neither the method nor that function: their speculator passes
        ``get_dflash_causal(draft_model_config)`` to every layer, so a mixed draft without
        ``dflash_config.causal`` runs its sliding layers non-causal there too. That is the
        release's behaviour, which the lanes then judge, not a gap of the harness.
        """
        layers = len(model.model.layers)
        if hasattr(model, "get_draft_attn_causal"):
            return tuple(bool(causal) for causal in model.get_draft_attn_causal())
        draft_model_config = vllm_config.speculative_config.draft_model_config
        if self.any_non_causal is not None:
            return (not self.any_non_causal(draft_model_config.hf_config),) * layers
        if self.draft_causal is not None:
            return (bool(self.draft_causal(draft_model_config)),) * layers
        raise ApiUnavailable(self._missing((_ANY_NON_CAUSAL, _DRAFT_CAUSAL)))

    def missing_for_forward(self) -> str | None:
        """What running a draft layer's kernels against the reference needs (cpu and gpu lanes)."""
        return self._missing(_FORWARD)

    def missing_for_draft_cell(self, loader: str, requested: str | None) -> str | None:
        """Why a cell that builds a draft through ``loader`` and runs its layers cannot be tried
        in this release (the cpu and gpu lanes): a missing entry point or backend member."""
        missing = self.missing_for_selection() or self.missing_for_loader(loader) or self.missing_for_forward()
        if missing is None and requested is not None:
            try:
                self.member(requested)
            except ApiUnavailable as why:
                return str(why)
        return missing

    def missing_cache_dtype(self, target: str, draft: str | None) -> str | None:
        """Why the cell's KV-cache dtypes cannot be asked of this release (``unaccepted_cache_dtype``):
        decided before the platform is asked, as a missing backend member is."""
        asked = {"--kv-cache-dtype": target, "speculative_config.kv_cache_dtype": draft}
        return unaccepted_cache_dtype(asked, self.cache_dtypes)

    def platform_flash_attn_version(self, head_size: int, has_sinks: bool) -> int | None:
        """The FlashAttention version FlashAttentionImpl.__init__ asks for a decoder layer with these
        settings (``get_flash_attn_version``, under the current config), passing only the arguments
        this release takes; None where the release has no such function."""
        if self.flash_attn_version is None:
            return None
        wanted = {"head_size": head_size, "has_sinks": has_sinks, "supports_fa4_hd256": True}
        takes = inspect.signature(self.flash_attn_version).parameters
        version = self.flash_attn_version(**{name: value for name, value in wanted.items() if name in takes})
        return None if version is None else int(version)

    def member(self, name: str) -> Any:
        try:
            return self.enum[name]
        except (KeyError, ValueError):
            raise ApiUnavailable(f"AttentionBackendEnum has no member {name} in this vLLM release") from None

    def backend_name(self, class_path: str) -> str:
        return str(self.resolve(class_path).get_name())


@functools.cache
def vllm_apis() -> VllmApis:
    return VllmApis.load()
