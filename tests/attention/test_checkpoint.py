"""The checkpoint writer records exactly what it wrote: the reference's only source of parameters."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from harness.attention.checkpoint import write_draft, write_target
from harness.deployment.models import DraftSpec, ModelShape

pytestmark = pytest.mark.vllm


def test_draft_config_carries_the_requested_attention(tmp_path):
    truth = write_draft(tmp_path, DraftSpec(causal=True, sink=True, sliding_window=16))
    config = json.loads((truth.path / "config.json").read_text())
    assert config["architectures"] == ["DFlashDraftModel"]
    assert config["dflash_config"] == {
        "mask_token_id": ModelShape().mask_token_id,
        "target_layer_ids": [0, 1],
        "causal": True,
        "attention_sink_bias": True,
        "use_swa": True,
        "swa_window_size": 16,
    }
    assert truth.window == 16
    assert truth.scale == ModelShape().head_dim ** -0.5


def test_no_window_writes_no_swa_keys(tmp_path):
    truth = write_draft(tmp_path, DraftSpec(causal=False, sink=False))
    dflash = json.loads((truth.path / "config.json").read_text())["dflash_config"]
    assert "use_swa" not in dflash and "swa_window_size" not in dflash
    assert truth.sinks is None and truth.window is None
    assert not any("sink" in name for name in load_file(truth.path / "model.safetensors"))


def test_recorded_sinks_are_the_written_sinks_and_matter(tmp_path):
    shape = ModelShape()
    truth = write_draft(tmp_path, DraftSpec(causal=False, sink=True))
    weights = load_file(truth.path / "model.safetensors")
    assert truth.sinks is not None and len(truth.sinks) == shape.draft_layers
    for layer in range(shape.draft_layers):
        written = weights[f"layers.{layer}.self_attn.attention_sink_bias"]
        assert written.shape == (shape.heads,)
        assert tuple(written.float().tolist()) == truth.layer_sinks(layer)
        # Sink logits of order one or more: a dropped sink moves the output visibly.
        assert written.float().abs().max() > 1.0


def test_target_and_drafts_differ_only_where_asked(tmp_path):
    target = write_target(tmp_path)
    config = json.loads((target / "config.json").read_text())
    assert config["architectures"] == ["Qwen3ForCausalLM"]
    a = write_draft(tmp_path, DraftSpec(causal=True, sink=False))
    b = write_draft(tmp_path, DraftSpec(causal=False, sink=False))
    assert a.path != b.path
    wa, wb = load_file(a.path / "model.safetensors"), load_file(b.path / "model.safetensors")
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[name], wb[name]) for name in wa)


def test_a_config_only_checkpoint_is_the_weighted_one_without_its_weights(tmp_path):
    """weights=False (the selection lane, load_format="dummy"): the same configs, no tensors,
    and no sink values to claim as the truth."""
    spec = DraftSpec(causal=False, sink=True, method="dflash2")
    weighted = write_draft(tmp_path / "weighted", spec)
    bare = write_draft(tmp_path / "bare", spec, weights=False)
    target = write_target(tmp_path / "bare", weights=False)
    assert (bare.path / "config.json").read_text() == (weighted.path / "config.json").read_text()
    assert (target / "config.json").read_text() == (write_target(tmp_path / "weighted") / "config.json").read_text()
    assert not (bare.path / "model.safetensors").exists() and not (target / "model.safetensors").exists()
    assert weighted.sinks is not None and bare.sinks is None


def test_calibrated_kv_scales_are_written_as_llm_compressor_writes_them_and_recorded(tmp_path):
    """An fp8-KV draft: per-layer k/v scales beside each attention's projections, the
    compressed-tensors kv_cache_scheme that makes vLLM load them, and the same weights otherwise."""
    shape = ModelShape()
    scaled = write_draft(tmp_path, DraftSpec(causal=True, sink=True, kv_scales=True))
    plain = write_draft(tmp_path, DraftSpec(causal=True, sink=True))
    config = json.loads((scaled.path / "config.json").read_text())
    assert config["quantization_config"]["quant_method"] == "compressed-tensors"
    assert config["quantization_config"]["kv_cache_scheme"]["strategy"] == "tensor"
    assert config["quantization_config"]["config_groups"] == {}
    assert "quantization_config" not in json.loads((plain.path / "config.json").read_text())
    weights, plain_weights = load_file(scaled.path / "model.safetensors"), load_file(plain.path / "model.safetensors")
    assert all(torch.equal(weights[name], plain_weights[name]) for name in plain_weights)
    assert scaled.kv_scales is not None and len(scaled.kv_scales) == shape.draft_layers
    for layer in range(shape.draft_layers):
        k_scale, v_scale = weights[f"layers.{layer}.self_attn.k_scale"], weights[f"layers.{layer}.self_attn.v_scale"]
        assert k_scale.shape == v_scale.shape == (1,)
        assert scaled.layer_kv_scales(layer) == (float(k_scale.float()), float(v_scale.float()))
    every = [value for pair in scaled.kv_scales for value in pair]
    # Distinct per layer and per K/V, none 1.0, and none saturating unit-normal inputs below 8.
    assert len(set(every)) == len(every) and 1.0 not in every
    assert all(8 / 448 <= value <= 16.1 / 448 for value in every)
    assert plain.kv_scales is None and plain.layer_kv_scales(0) == (1.0, 1.0)
