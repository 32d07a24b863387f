"""Every field of the installed vLLM's SpeculativeConfig is one the harness has classified
(harness/deployment/draft_options.py), so a field a new release adds is noticed here, as a new
backend is by test_enum_coverage; and the classification agrees with what vLLM's own code says
where the release says it: the fields it fills in itself, the overrides it documents for a
draft's config, and (0.34.0 on) the method-specific options each speculator accepts."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from harness.deployment.draft_options import DRAFT_OPTIONS, SPECULATIVE_FIELDS, Role

pytestmark = pytest.mark.vllm


def _installed_fields() -> dict[str, dataclasses.Field[typing.Any]]:
    from vllm.config.speculative import SpeculativeConfig

    return {field.name: field for field in dataclasses.fields(SpeculativeConfig)}


def test_every_speculative_config_field_of_this_release_is_classified() -> None:
    unknown = sorted(set(_installed_fields()) - set(SPECULATIVE_FIELDS))
    assert unknown == [], f"SpeculativeConfig fields harness/deployment/draft_options.py does not classify: {unknown}"


def test_the_fields_vllm_fills_in_itself_are_the_engine_role() -> None:
    from vllm.config.speculative import SpeculativeConfig

    hints = typing.get_type_hints(SpeculativeConfig, include_extras=True)
    # SkipValidation marks what the engine passes in or __post_init__ generates; init=False what
    # vLLM moves there itself (0.34.0's custom_method).
    filled = {
        name
        for name, field in _installed_fields().items()
        if not field.init or "SkipValidation" in repr(hints.get(name))
    }
    engine = {name for name, field in SPECULATIVE_FIELDS.items() if field.role == Role.ENGINE}
    assert filled == engine & set(_installed_fields())


def test_the_documented_draft_overrides_are_draft_options_or_axes() -> None:
    from vllm.config import speculative

    overrides = {source for source, _, _ in getattr(speculative, "_DRAFT_VLLM_CONFIG_OVERRIDES", ())}
    assert overrides, "this vLLM lists no _DRAFT_VLLM_CONFIG_OVERRIDES"
    assert {name: SPECULATIVE_FIELDS[name].role for name in overrides} == {
        name: Role.AXIS if name in ("attention_backend", "kv_cache_dtype") else Role.DRAFT for name in overrides
    }


def test_the_method_specific_options_dflash_and_dspark_accept_are_draft_options() -> None:
    from vllm.config import speculative

    method_specific = getattr(speculative, "_METHOD_SPECIFIC_OPTIONS", None)
    if method_specific is None:
        pytest.skip(
            "this vLLM release has no _METHOD_SPECIFIC_OPTIONS (0.34.0 added it); draft_options.py cites 0.33.0"
        )
    from vllm.v1.worker.gpu.spec_decode.dflash.config import DFlashSpeculatorConfig
    from vllm.v1.worker.gpu.spec_decode.dspark.config import DSparkSpeculatorConfig

    accepted = set(DFlashSpeculatorConfig.supported_options) | set(DSparkSpeculatorConfig.supported_options)
    options = {field for option in DRAFT_OPTIONS.values() for field, _ in option.fields}
    assert accepted <= options
    assert {name for name in method_specific if name not in accepted} <= {
        name for name, field in SPECULATIVE_FIELDS.items() if field.role == Role.OTHER_METHOD
    }
