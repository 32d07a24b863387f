"""The provenance audit (harness.attention.provenance): every plain attribute of a draft layer and
its impl against a reference built for what the draft asked, every plain config field against the
target's or a documented override; a difference names where, the setting and both values, what
cannot be judged is listed, and what is not a setting is skipped by a stated rule."""

from __future__ import annotations

import enum
from types import SimpleNamespace

import pytest

from harness.attention.provenance import (
    HELD,
    Attributes,
    LayerProvenance,
    Override,
    config_fields,
    details,
    documented_overrides,
    judge_config,
    judge_layers,
    plain,
    read,
    verdict_differences,
)

pytestmark = pytest.mark.pure

LAYER = "model.layers.0.self_attn.attn"


class Backend(enum.Enum):
    FLASH_ATTN = "flash"


def test_settings_are_plain_values_and_everything_else_is_skipped_by_its_rule() -> None:
    assert plain(3) == (True, 3)
    assert plain(None) == (True, None)
    assert plain("fp8") == (True, "fp8")
    assert plain(Backend.FLASH_ATTN) == (True, "Backend.FLASH_ATTN")
    assert plain((63, 0)) == (True, (63, 0))
    assert plain(tuple(range(9))) == (False, "container")  # a long tuple is data
    assert plain({"a": 1}) == (False, "container")
    assert plain(len) == (False, "callable")
    assert plain(SimpleNamespace()) == (False, "object")


def test_read_walks_every_instance_attribute() -> None:
    obj = SimpleNamespace(vllm_flash_attn_version=3, hooks={}, backend=Backend.FLASH_ATTN)
    assert read(obj) == Attributes(
        {"backend": "Backend.FLASH_ATTN", "vllm_flash_attn_version": 3}, {"hooks": "container"}
    )


def _layer(impl: dict[str, object], reference_impl: dict[str, object] | None) -> LayerProvenance:
    own = Attributes({"layer_name": LAYER, "attn_type": "decoder", "head_size": 128}, {"kv_cache": "tensor"})
    reference = Attributes({"layer_name": "provenance-reference", "attn_type": "decoder", "head_size": 64})
    if reference_impl is None:
        return LayerProvenance(LAYER, own, Attributes(impl), why="vLLM did not build it: TypeError: x")
    return LayerProvenance(LAYER, own, Attributes(impl), reference, Attributes(reference_impl))


def test_an_impl_attribute_other_than_the_references_is_named_with_both_values() -> None:
    judged = judge_layers((_layer({"vllm_flash_attn_version": 2}, {"vllm_flash_attn_version": 3}),))
    (found,) = judged.differences
    assert str(found) == f"{LAYER}: impl.vllm_flash_attn_version is 2, the draft asked for 3"
    assert verdict_differences(judged) == (found,)


def test_the_layers_name_and_the_named_audits_settings_are_not_compared_twice() -> None:
    # head_size differs here, but harness.attention.audit judges it with its own message.
    judged = judge_layers((_layer({"scale": 0.1}, {"scale": 0.2}),))
    assert judged.differences == ()


def test_a_layer_without_a_reference_and_an_attribute_the_reference_lacks_are_listed_not_skipped() -> None:
    judged = judge_layers((_layer({"fa": 1}, None),))
    assert judged.differences == ()
    assert any("impl: no reference (vLLM did not build it" in line for line in judged.not_judged)
    judged = judge_layers((_layer({"new_knob": 1}, {}),))
    assert judged.not_judged == (f"{LAYER}: impl.new_knob: the reference has no such attribute",)


def test_skipped_attributes_are_listed_by_rule() -> None:
    judged = judge_layers((_layer({}, {}),))
    assert judged.skipped == {"tensor": ("layer.kv_cache",)}
    assert "tensor (a tensor is weight or runtime state" in next(iter(details(judged)["skipped"]))


class CacheConfig(SimpleNamespace):
    """A stand-in section: read field by field because its class name ends in Config (and it
    passes for vLLM's: is_section reads the module)."""


CacheConfig.__module__ = "vllm.config.cache"


def _config(**sections: dict[str, object]) -> Attributes:
    return config_fields(SimpleNamespace(**{name: CacheConfig(**fields) for name, fields in sections.items()}))


def test_a_config_is_read_section_by_section_and_its_plain_top_level_fields_by_name() -> None:
    nested = CacheConfig(level=2)
    hf_config = type("Qwen3Config", (SimpleNamespace,), {})(head_dim=128)  # a checkpoint's, not vLLM's
    config = SimpleNamespace(
        cache_config=CacheConfig(block_size=16, pass_config=nested, hf_config=hf_config),
        instance_id="a",
        additional_config={},
    )
    read_back = config_fields(config)
    assert read_back.values == {
        "cache_config.block_size": 16,
        "cache_config.pass_config.level": 2,
        "instance_id": "a",
    }
    assert read_back.skipped == {"additional_config": "container", "cache_config.hf_config": "object"}


def test_a_config_field_the_draft_did_not_set_inherits_the_targets() -> None:
    target = _config(cache_config={"cache_dtype": "auto", "block_size": 16}, kernel_config={"moe_backend": "x"})
    draft = _config(cache_config={"cache_dtype": "auto", "block_size": 32}, kernel_config={"moe_backend": "x"})
    (found,) = judge_config(draft, target, (), "dflash").differences
    assert str(found) == "draft config: cache_config.block_size is 32, the draft asked for 16"


def test_a_documented_override_is_what_the_draft_asked_for() -> None:
    overrides = documented_overrides({"attention_backend": "FLASH_ATTN", "kv_cache_dtype": "fp8"}, True)
    assert {o.key: o.value for o in overrides} == {
        "attention_config.backend": "FLASH_ATTN",
        "attention_config.use_non_causal": True,
        "cache_config.cache_dtype": "fp8",
    }
    target = _config(attention_config={"backend": None, "use_non_causal": False}, cache_config={"cache_dtype": "auto"})
    draft = _config(attention_config={"backend": None, "use_non_causal": True}, cache_config={"cache_dtype": "fp8"})
    judged = judge_config(draft, target, overrides, "dflash")
    (found,) = judged.differences
    assert str(found) == "draft config: attention_config.backend is none, the draft asked for FLASH_ATTN"
    assert verdict_differences(judged) == ()  # the backend is the verdict's own comparison


def test_an_unset_override_is_no_override() -> None:
    overrides = documented_overrides({"attention_backend": None, "kv_cache_dtype": None, "moe_backend": None}, False)
    assert [o.key for o in overrides] == ["attention_config.backend", "attention_config.use_non_causal"]


def test_sections_a_loader_derives_by_its_own_rule_are_listed_not_judged() -> None:
    target = _config(load_config={"device": "cuda"}, parallel_config={"tensor_parallel_size": 2})
    draft = _config(load_config={"device": "cpu"}, parallel_config={"tensor_parallel_size": 1})
    dflash = judge_config(draft, target, (), "dflash")
    assert [d.setting for d in dflash.differences] == ["parallel_config.tensor_parallel_size"]
    assert any(line.startswith("draft config: load_config: ") for line in dflash.not_judged)
    dspark = judge_config(draft, target, (), "dspark")
    assert dspark.differences == ()
    assert any(line.startswith("draft config: parallel_config: ") for line in dspark.not_judged)


def test_a_held_difference_is_recorded_but_decides_no_verdict() -> None:
    target = _config(cache_config={"user_specified_block_size": False})
    draft = _config(cache_config={"user_specified_block_size": True})
    judged = judge_config(draft, target, (Override("x.y", 1, "here"),), "dflash")
    assert len(judged.differences) == 1 and verdict_differences(judged) == ()
    assert details(judged)["held_from_verdict"] == {
        "cache_config.user_specified_block_size": HELD["cache_config.user_specified_block_size"]
    }


def _marked(mark: bool) -> LayerProvenance:
    empty = Attributes({})
    return LayerProvenance(LAYER, Attributes({"is_draft_layer": mark}), empty, empty, empty)


def test_a_proposers_mark_is_judged_against_the_mark() -> None:
    (found,) = judge_layers((_marked(False),)).differences
    assert str(found) == f"{LAYER}: layer.is_draft_layer is False, the draft asked for True"
    assert judge_layers((_marked(True),)).differences == ()


def test_the_configs_own_instance_id_is_no_setting() -> None:
    target = config_fields(SimpleNamespace(instance_id="1", shutdown_timeout=0))
    draft = config_fields(SimpleNamespace(instance_id="2", shutdown_timeout=5))
    assert [d.setting for d in judge_config(draft, target, (), "dflash").differences] == ["shutdown_timeout"]
