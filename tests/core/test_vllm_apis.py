"""How the API layer reads a v2 draft's causal flags in each kind of release, and what it calls a
release that has no way to tell (unavailable, never a crash). Fake vLLM objects: this checks our
choice of entry point, the lanes' real runs check the entry points themselves."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest

from harness.attention.apis import ApiUnavailable, VllmApis

pytestmark = pytest.mark.pure

ANY_NON_CAUSAL = "vllm.model_executor.models.qwen3_dflash.dflash_has_any_non_causal"
DRAFT_CAUSAL = "vllm.v1.worker.gpu.spec_decode.dflash.utils.get_dflash_causal"


def _apis(**fields: Any) -> VllmApis:
    every = {name: object() for name in VllmApis.__dataclass_fields__ if name != "missing"}
    return VllmApis(**{**every, **fields, "missing": fields.get("missing", {})})


def _config(hf_config: Any) -> Any:
    draft_model_config = SimpleNamespace(hf_config=hf_config)
    return SimpleNamespace(speculative_config=SimpleNamespace(draft_model_config=draft_model_config))


class _Model:
    def __init__(self, layers: int) -> None:
        self.model = SimpleNamespace(layers=[None] * layers)


class _PerLayerModel(_Model):
    def get_draft_attn_causal(self) -> list[bool]:
        return [True, False, True]


def test_a_model_with_per_layer_flags_is_read_per_layer() -> None:
    apis = _apis(any_non_causal=lambda hf: pytest.fail("the model's own flags come first"))
    assert apis.v2_draft_causal(_PerLayerModel(3), _config("hf")) == (True, False, True)


def test_without_the_method_vllm_0_26_on_gives_every_layer_one_flag_from_the_config() -> None:
    apis = _apis(any_non_causal=lambda hf: hf == "has-non-causal", draft_causal=None)
    assert apis.v2_draft_causal(_Model(2), _config("has-non-causal")) == (False, False)
    assert apis.v2_draft_causal(_Model(2), _config("all-causal")) == (True, True)


def test_vllm_0_24_reads_dflash_config_causal_for_all_layers() -> None:
    seen = []

    def get_dflash_causal(draft_model_config: Any) -> bool:
        seen.append(draft_model_config.hf_config)
        return True

    apis = _apis(any_non_causal=None, draft_causal=get_dflash_causal, missing={ANY_NON_CAUSAL: "ImportError: x"})
    assert apis.v2_draft_causal(_Model(3), _config("hf")) == (True, True, True)
    assert seen == ["hf"]
    assert apis.missing_for_loader("v2") is None


def test_a_release_with_no_causality_source_makes_v2_cells_unavailable() -> None:
    gaps = {ANY_NON_CAUSAL: "ImportError: gone", DRAFT_CAUSAL: "AttributeError: gone"}
    apis = _apis(any_non_causal=None, draft_causal=None, missing=gaps)
    why = apis.missing_for_loader("v2")
    assert why is not None and ANY_NON_CAUSAL in why and DRAFT_CAUSAL in why
    assert apis.missing_for_loader("v1") is None
    with pytest.raises(ApiUnavailable, match="get_dflash_causal"):
        apis.v2_draft_causal(_Model(1), _config("hf"))
    # A missing loader is named first: causality is moot without it.
    loader = "vllm.v1.worker.gpu.spec_decode.dflash.utils.load_dflash_model"
    no_loader = replace(apis, missing={**gaps, loader: "ImportError: no v2"})
    assert loader in (no_loader.missing_for_loader("v2") or "")


class _SchemaError(ValueError):
    """The shape of pydantic's ValidationError: a title and errors()."""

    def __init__(self, title: str, *errors: dict[str, Any]) -> None:
        super().__init__(title)
        self.title, self._errors = title, list(errors)

    def errors(self) -> list[dict[str, Any]]:
        return self._errors


def test_an_argument_the_release_lacks_is_a_config_gap_and_a_refused_value_is_not() -> None:
    from harness.attention.apis import config_gap

    unknown = _SchemaError(
        "AttentionConfig", {"type": "unexpected_keyword_argument", "loc": ("backend_per_kind",), "input": {}}
    )
    assert config_gap(unknown) == "this vLLM release's AttentionConfig has no backend_per_kind taking {}"
    method = _SchemaError(
        "SpeculativeConfig",
        {"type": "literal_error", "loc": ("method",), "input": "dspark"},
        {"type": "literal_error", "loc": ("method",), "input": "dspark"},
    )
    assert config_gap(method) == "this vLLM release's SpeculativeConfig has no method taking 'dspark'"
    refused = _SchemaError("SpeculativeConfig", {"type": "value_error", "loc": (), "input": 3})
    mixed = _SchemaError("X", unknown.errors()[0], refused.errors()[0])
    assert config_gap(refused) is None and config_gap(mixed) is None and config_gap(ValueError("plain")) is None


def test_a_draft_architecture_the_registry_lacks_is_unavailable_and_other_value_errors_are_not() -> None:
    # vLLM 0.24.0-0.27.1 register no DFlash2DraftModel: SpeculativeConfig's architecture check says so.
    from harness.attention.apis import unregistered_architecture

    error = ValueError(
        "1 validation error for SpeculativeConfig\n  Value error, Model architectures ['DFlash2DraftModel'] are "
        "not supported for now. Supported architectures: dict_keys(['AfmoeForCausalLM', ...])"
    )
    assert unregistered_architecture(error) == (
        "this vLLM release registers no model class for the draft's architecture 'DFlash2DraftModel'"
    )
    assert unregistered_architecture(ValueError("Selected backend FLASH_ATTN is not valid")) is None


def test_a_kv_cache_dtype_the_release_lacks_is_unavailable_before_the_platform_is_asked() -> None:
    from harness.attention.apis import unaccepted_cache_dtype

    older = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
    apis = _apis(cache_dtypes=older)
    assert apis.missing_cache_dtype("turboquant_k8v4", None) == (
        "this vLLM release's CacheDType has no --kv-cache-dtype='turboquant_k8v4' (it lists 6 KV-cache dtypes)"
    )
    assert apis.missing_cache_dtype("fp8", "ultraquant_4bit") == (
        "this vLLM release's CacheDType has no speculative_config.kv_cache_dtype='ultraquant_4bit' "
        "(it lists 6 KV-cache dtypes)"
    )
    # Values the release lists, and an unset draft dtype, decide nothing here.
    assert apis.missing_cache_dtype("fp8_e5m2", None) is None
    assert apis.missing_cache_dtype("auto", "bfloat16") is None
    # A release without a CacheDType to read is left to its config schema (config_gap).
    assert unaccepted_cache_dtype({"--kv-cache-dtype": "turboquant_k8v4"}, None) is None
