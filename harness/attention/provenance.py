"""The provenance audit of a draft's attention layers (issue 38): every setting, not a named list.

``harness.attention.audit`` checks the settings the harness thought of. A setting nobody listed (a
FlashAttention version on the impl, a quantization flag, a MoE backend) can still reach a draft from
the target. This audit reads **every** plain attribute of each draft attention layer and of its
impl, and every plain field of the draft's effective ``VllmConfig`` (the one the loader hands
``get_model``), and compares them with what the draft asked for:

- a layer or impl attribute with the same attribute of a *reference* layer: vLLM's own
  ``Attention`` built for what the draft asked (its checkpoint's heads, head size, scale, window,
  sinks; its speculative config's KV-cache dtype and backend), on the backend the draft layer
  carries, under the config the loader is documented to give the draft;
- a config field with the target's value, where the draft asked nothing (vLLM's documented rule:
  ``_DRAFT_VLLM_CONFIG_OVERRIDES`` in ``config/speculative.py`` overrides "only when set", and
  ``SpeculativeConfig.apply_draft_overrides``: "an unset field keeps whatever the target
  resolved"), or with the draft's own value where a loader documents the override
  (``documented_overrides``).

Everything here is pure over plain data: ``plain`` and ``read`` duck-type the objects (no vLLM
or torch import), the comparisons take mappings. The child reads the objects; the verdict is
decided from what these functions return.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

# A tuple longer than this is data (a shape list, a table), not a setting.
SMALL_TUPLE = 8

# Why a value is not compared, one rule per kind, in the order ``plain`` checks them.
SKIP_RULES: Mapping[str, str] = {
    "tensor": "a tensor is weight or runtime state (the fp8 scales the named audit judges are floats beside it)",
    "module": "a submodule is audited as a layer of its own or is not attention",
    "callable": "a function or bound method is code, not a setting",
    "container": "a dict, list or set is registry or runtime state (hooks, parameters, caches)",
    "object": "another object (a config, a backend class, a quant method) has no value of its own to compare",
}

# Attributes that differ between any two layers by construction.
IDENTITY: Mapping[str, str] = {
    "layer_name": "the layer's own name (the reference is named apart so it registers nowhere)",
}

# Config fields that name the config object itself, not a setting of the draft's.
CONFIG_IDENTITY: Mapping[str, str] = {
    "instance_id": "VllmConfig.__post_init__ draws a new one for every config, so for every replace() (config/vllm.py)",
}

# Marks a proposer puts on every draft layer after the build, judged against the mark itself (the
# reference is built by no proposer): vLLM 0.33.0 llm_base_proposer.py:1335 (V1, in load_model),
# v1/worker/gpu/spec_decode/speculator.py:242 (V2, at start-up, after this audit reads the layers).
MARKS: Mapping[str, Any] = {"is_draft_layer": True}

# Layer attributes the named audit (``harness.attention.audit.SETTINGS``) already judges against
# what the draft asked: compared there, with its messages, so not twice.
JUDGED_BY_AUDIT: frozenset[str] = frozenset(
    {
        "head_size",
        "num_kv_heads",
        "sliding_window",
        "dtype",
        "kv_cache_dtype",
        "kv_cache_torch_dtype",
        "use_mm_prefix",
        "has_sink",
        "scale",
        "_k_scale_float",
        "_v_scale_float",
        "_q_scale_float",
    }
)

# The parts of the draft's VllmConfig this audit reads: every attribute whose value is a vLLM
# config object (its class name ends in "Config": model, cache, attention, parallel, compilation,
# kernel, scheduler, load, device, quant, speculative, ...), field by field, and the configs nested
# in those (compilation_config.pass_config, parallel_config.eplb_config, ...) down to SECTION_DEPTH;
# and every plain top-level field. A Hugging Face config (model_config.hf_config) is the checkpoint's,
# not vLLM's derivation: skipped as an object.
SECTION_SUFFIX = "Config"
SECTION_DEPTH = 3


def is_section(value: Any) -> bool:
    """A vLLM sub-config of a VllmConfig (read field by field), by its class name and module."""
    kind = type(value)
    return kind.__name__.endswith(SECTION_SUFFIX) and kind.__module__.startswith("vllm") and hasattr(value, "__dict__")


# Sections a loader derives for the draft by a rule of its own that no single inherited or asked
# value decides: listed in the cell's details as not judged, with the code that derives them.
NOT_JUDGED_SECTIONS: Mapping[str, str] = {
    "load_config": "the draft's own load config (get_draft_load_config, model_loader/utils.py), not the target's",
}
# Per method: DSpark's loader derives the draft's parallel config (_get_dspark_parallel_config,
# dspark/utils.py: PP 1, the draft's TP, EPLB and elastic EP off).
NOT_JUDGED_BY_METHOD: Mapping[str, Mapping[str, str]] = {
    "dspark": {
        "parallel_config": "derived by _get_dspark_parallel_config (dspark/utils.py), not inherited",
        "quant_config": "reset to the draft's own (get_draft_quant_config, dspark/utils.py), not inherited",
    },
}


@dataclass(frozen=True)
class Attributes:
    """One object's plain attributes (``values``) and the names ``plain`` skipped, by rule."""

    values: Mapping[str, Any]
    skipped: Mapping[str, str] = field(default_factory=dict)


def plain(value: Any) -> tuple[bool, Any]:
    """``(True, comparable)`` for a setting-like value, else ``(False, rule)`` (a SKIP_RULES key).

    Settings are None, bool, int, float, str, an enum (as ``Type.NAME``), a torch dtype (as torch
    prints it) and tuples of at most SMALL_TUPLE of those."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return True, value
    if isinstance(value, enum.Enum):
        return True, f"{type(value).__name__}.{value.name}"
    kind = type(value)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        return True, str(value)
    if isinstance(value, tuple) and len(value) <= SMALL_TUPLE:
        items = [plain(item) for item in value]
        if all(ok for ok, _ in items):
            return True, tuple(item for _, item in items)
        return False, "container"
    mro = {f"{base.__module__}.{base.__name__}" for base in kind.__mro__}
    if "torch.Tensor" in mro or "torch.nn.parameter.Parameter" in mro:
        return False, "tensor"
    if "torch.nn.modules.module.Module" in mro:
        return False, "module"
    if callable(value):
        return False, "callable"
    if isinstance(value, (dict, list, set, frozenset, tuple)):
        return False, "container"
    return False, "object"


def read(obj: Any) -> Attributes:
    """Every instance attribute of ``obj`` (``vars``), sorted into plain values and skips."""
    values: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    for name, value in sorted(vars(obj).items()):
        ok, got = plain(value)
        if ok:
            values[name] = got
        else:
            skipped[name] = got
    return Attributes(values, skipped)


def config_fields(config: Any) -> Attributes:
    """The plain fields of a VllmConfig: each section's (``is_section``, nested ones too) keyed by
    its path (``section.field``, ``section.nested.field``), each plain top-level field by its name;
    anything else skipped by its rule."""
    values: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    _walk(config, "", 0, values, skipped)
    return Attributes(values, skipped)


def _walk(obj: Any, prefix: str, depth: int, values: dict[str, Any], skipped: dict[str, str]) -> None:
    for name, value in sorted(vars(obj).items()):
        key = f"{prefix}{name}"
        if depth < SECTION_DEPTH and is_section(value):
            _walk(value, f"{key}.", depth + 1, values, skipped)
            continue
        ok, got = plain(value)
        if ok:
            values[key] = got
        else:
            skipped[key] = got


@dataclass(frozen=True)
class Override:
    """A config field a loader documents giving the draft its own value."""

    key: str  # section.field
    value: Any
    source: str  # the vLLM code that sets it


# The speculative-config field each documented override copies into the draft's config
# (``_DRAFT_VLLM_CONFIG_OVERRIDES``, config/speculative.py); the draft's causality is not one.
OVERRIDE_SOURCES: Mapping[str, str] = {
    "attention_config.backend": "attention_backend",
    "cache_config.cache_dtype": "kv_cache_dtype",
    "kernel_config.moe_backend": "moe_backend",
}


def documented_overrides(speculative: Mapping[str, Any], any_non_causal: bool) -> tuple[Override, ...]:
    """What the draft's speculative config and checkpoint set in its config, per vLLM's loaders.

    ``speculative``: the plain fields of the cell's SpeculativeConfig. Every loader sets the
    backend whether or not the draft asked for one (dflash/utils.py ``backend=speculative_config.
    attention_backend``; llm_base_proposer.py "Never inherit the attention backend from base"),
    and the draft's causality (dflash/utils.py ``use_non_causal=dflash_has_any_non_causal``;
    dflash.py ``use_non_causal=not self.dflash_causal``). The rest follow
    ``_DRAFT_VLLM_CONFIG_OVERRIDES`` (config/speculative.py): only when set."""
    overrides = [
        Override("attention_config.backend", speculative.get("attention_backend"), "dflash/utils.py load_dflash_model"),
        Override("attention_config.use_non_causal", any_non_causal, "dflash/utils.py dflash_has_any_non_causal"),
    ]
    for key in ("cache_config.cache_dtype", "kernel_config.moe_backend"):
        value = speculative.get(OVERRIDE_SOURCES[key])
        if value is not None:
            overrides.append(Override(key, value, "config/speculative.py _DRAFT_VLLM_CONFIG_OVERRIDES"))
    return tuple(overrides)


@dataclass(frozen=True)
class ProvenanceDifference:
    where: str  # a layer name, or "draft config"
    setting: str
    asked: Any
    got: Any

    def __str__(self) -> str:
        return f"{self.where}: {self.setting} is {_text(self.got)}, the draft asked for {_text(self.asked)}"


def _text(value: Any) -> str:
    return "none" if value is None else str(value)


@dataclass(frozen=True)
class LayerProvenance:
    """One draft layer as built and the reference vLLM builds for what the draft asked (None:
    no reference could be built, ``why`` says so)."""

    name: str
    layer: Attributes
    impl: Attributes
    reference_layer: Attributes | None = None
    reference_impl: Attributes | None = None
    why: str = ""


@dataclass(frozen=True)
class Judgement:
    differences: tuple[ProvenanceDifference, ...]
    not_judged: tuple[str, ...]  # "name: why", every field the audit read but could not judge
    skipped: Mapping[str, tuple[str, ...]]  # rule -> names (union over layers and config)


def judge_layers(layers: tuple[LayerProvenance, ...]) -> Judgement:
    """Every plain attribute of each draft layer and impl against its reference's."""
    found: list[ProvenanceDifference] = []
    not_judged: list[str] = []
    skipped: dict[str, set[str]] = {}
    for layer in layers:
        for part, got, want in (
            ("layer", layer.layer, layer.reference_layer),
            ("impl", layer.impl, layer.reference_impl),
        ):
            for name, rule in got.skipped.items():
                skipped.setdefault(rule, set()).add(f"{part}.{name}")
            if want is None:
                not_judged.append(f"{layer.name}: {part}: no reference ({layer.why})")
                continue
            for name, value in got.values.items():
                setting = f"{part}.{name}"
                if name in IDENTITY or (name in JUDGED_BY_AUDIT and part == "layer"):
                    continue
                if part == "impl" and name in JUDGED_BY_AUDIT:
                    continue  # the impl's copy of a setting the named audit judges on the layer
                if part == "layer" and name in MARKS:
                    if not _same(value, MARKS[name]):
                        found.append(ProvenanceDifference(layer.name, setting, MARKS[name], value))
                    continue
                if name not in want.values:
                    not_judged.append(f"{layer.name}: {setting}: the reference has no such attribute")
                    continue
                if not _same(value, want.values[name]):
                    found.append(ProvenanceDifference(layer.name, setting, want.values[name], value))
            for name in sorted(set(want.values) - set(got.values) - set(got.skipped)):
                not_judged.append(f"{layer.name}: {part}.{name}: only the reference has it")
    return Judgement(tuple(found), tuple(sorted(set(not_judged))), _sorted(skipped))


def judge_config(draft: Attributes, target: Attributes, overrides: tuple[Override, ...], method: str) -> Judgement:
    """Every plain field of the draft's effective config against the target's, or the draft's own
    value where a loader documents the override."""
    own = {override.key: override.value for override in overrides}
    sections = {**NOT_JUDGED_SECTIONS, **NOT_JUDGED_BY_METHOD.get(method, {})}
    found: list[ProvenanceDifference] = []
    not_judged: list[str] = [f"draft config: {section}: {why}" for section, why in sections.items()]
    skipped: dict[str, set[str]] = {}
    for name, rule in draft.skipped.items():
        skipped.setdefault(rule, set()).add(name)
    for key, value in draft.values.items():
        if key.split(".", 1)[0] in sections or key in CONFIG_IDENTITY:
            continue
        if key in own:
            want = own[key]
        elif key in target.values:
            want = target.values[key]
        else:
            not_judged.append(f"draft config: {key}: the target's config has no such field")
            continue
        if not _same(value, want):
            found.append(ProvenanceDifference("draft config", key, want, value))
    return Judgement(tuple(found), tuple(not_judged), _sorted(skipped))


def _same(got: Any, want: Any) -> bool:
    if isinstance(got, float) and isinstance(want, float):
        return got == want or (got != got and want != want)  # NaN equals NaN here: one setting, not a number
    return bool(got == want)


def _sorted(skipped: Mapping[str, set[str]]) -> dict[str, tuple[str, ...]]:
    return {rule: tuple(sorted(names)) for rule, names in sorted(skipped.items())}


def combine(*judgements: Judgement) -> Judgement:
    skipped: dict[str, set[str]] = {}
    for judgement in judgements:
        for rule, names in judgement.skipped.items():
            skipped.setdefault(rule, set()).update(names)
    return Judgement(
        tuple(d for j in judgements for d in j.differences),
        tuple(n for j in judgements for n in j.not_judged),
        _sorted(skipped),
    )


# Differences the cell's details record but the verdict does not take: one another comparison
# judges, or one vLLM really produces that would change cells the matrix already judges (the lead
# decides those, issue 38).
HELD: Mapping[str, str] = {
    "attention_config.backend": (
        "the backend each draft layer carries is the verdict's own comparison (wrong-backend against the "
        "platform's choice); the config field that carries the request is recorded beside it"
    ),
    "cache_config.user_specified_block_size": (
        "vLLM's config replace() keeps init fields only (config/utils.py replace), so the draft's copied "
        "CacheConfig gets the already-defaulted block_size as an argument and _apply_block_size_default "
        "(config/cache.py) marks it user-specified; the draft's selector is then asked about that block "
        "size (v1/attention/selector.py), the target's about none"
    ),
}


def verdict_differences(judgement: Judgement) -> tuple[ProvenanceDifference, ...]:
    """The differences that decide a verdict (wrong-setting): all but the HELD ones."""
    return tuple(difference for difference in judgement.differences if difference.setting not in HELD)


def details(judgement: Judgement) -> dict[str, Any]:
    """What the cell's details record: the differences (and which are held from the verdict,
    HELD), what was not judged, the skips by rule."""
    held = sorted({difference.setting for difference in judgement.differences if difference.setting in HELD})
    return {
        "differences": [str(difference) for difference in judgement.differences],
        "held_from_verdict": {setting: HELD[setting] for setting in held},
        "not_judged": list(judgement.not_judged),
        "skipped": {f"{rule} ({SKIP_RULES[rule]})": list(names) for rule, names in judgement.skipped.items()},
    }
