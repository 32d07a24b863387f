"""`dflash-matrix repro` for a cpu cell, run for real in this env: the standalone script of a cell
that passes exits 0, and the same script with a fault planted in vLLM (CPU_ATTN's kernel runs
without the layer's sinks, ``plants.drop_sinks``) sees the mismatch and exits 1.

The report is written here from the bundled cpu matrix and its expectations, as a lane run would
record the cell; the script recomputes everything itself (checkpoint, loader, kernels, reference)
from the data ``repro`` wrote into it, and the checkpoints it writes are the lane's, tensor for
tensor (``harness.attention.checkpoint``)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from harness.attention import checkpoint
from harness.bundled import matrix_path
from harness.cli import main
from harness.commands import repro
from harness.deployment.models import ModelShape
from harness.deployment.settings import draft_shape, draft_spec
from harness.expectations import expectations_for
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.vllm

CELL_ID = "CPU_ATTN-causal-sink-bf16-v2"
REPO = Path(__file__).resolve().parents[2]


def _report(folder: Path, cell_id: str = CELL_ID) -> Path:
    matrix = load_matrix(matrix_path("cpu"))
    cell = next(c for c in expand(matrix) if c.id == cell_id)
    expected = expectations_for(matrix, "0.32.0").for_cell(cell)
    run = {"lane": "cpu", "key": "cpu", "matrix": "cpu", "matrix_path": "matrices/cpu.toml", "vllm_version": "0.32.0"}
    recorded = {
        "id": cell_id,
        "lane": "cpu",
        "run": "cpu",
        "axes": dict(cell.axes),
        "expected": str(expected.verdict),
        "expected_message": expected.message,
        "verdict": "pass",
        "message": "recorded by this test",
        "tolerance": cell.tolerance,
    }
    folder.mkdir()
    (folder / "matrix.json").write_text(json.dumps({"schema": "dflash-matrix/2", "runs": [run], "cells": [recorded]}))
    return folder


def _run(script: Path, plant: str | None) -> subprocess.CompletedProcess[str]:
    # The plant patches vLLM in the script's own process before the script runs, as the lane's
    # planted-fault tests patch the cell process.
    code = "import runpy, sys\n"
    if plant:
        code += f"sys.path.insert(0, {str(REPO)!r})\nfrom tests.cpu_lane.plants import {plant}\n{plant}(None)\n"
    code += f"sys.argv = [{str(script)!r}]\nrunpy.run_path({str(script)!r}, run_name='__main__')\n"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=script.parent, capture_output=True, text=True, timeout=900, check=False
    )


def test_the_repro_of_a_passing_cell_exits_0_and_with_a_planted_fault_exits_1(tmp_path: Path) -> None:
    script = tmp_path / "repro.py"
    assert main(["repro", CELL_ID, "--report", str(_report(tmp_path / "report")), "--out", str(script)]) == 0
    clean = _run(script, None)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    assert "observed: pass: CPU_ATTN, CPU_ATTN" in clean.stdout
    planted = _run(script, "drop_sinks")
    assert planted.returncode == 1, planted.stdout[-3000:] + planted.stderr[-3000:]
    assert "observed: mismatch" in planted.stdout and "FAILURE REPRODUCES" in planted.stdout


def test_the_repro_of_a_draft_with_its_own_heads_passes_and_names_the_heads_a_planted_loader_gives_it(
    tmp_path: Path,
) -> None:
    """An MHA draft behind the 4/2 target (draft_heads = 4/4): the script writes and runs the draft's own
    heads; with every layer taking the target's heads, it reports the KV heads the layers carry."""
    cell_id = "CPU_ATTN-noncausal-nosink-dheads.4x4-bf16-v2"
    script = tmp_path / "repro.py"
    assert main(["repro", cell_id, "--report", str(_report(tmp_path / "report", cell_id)), "--out", str(script)]) == 0
    clean = _run(script, None)
    assert clean.returncode == 0, clean.stdout[-3000:] + clean.stderr[-3000:]
    planted = _run(script, "draft_takes_target_heads")
    assert planted.returncode == 1, planted.stdout[-3000:] + planted.stderr[-3000:]
    assert "num_kv_heads is 2, the draft asked for 4" in planted.stdout, planted.stdout[-3000:]


@pytest.mark.parametrize(
    "cell_id",
    [
        CELL_ID,
        "CPU_ATTN-causal-sink-swa4-mixednative-bf16-v2",
        "CPU_ATTN-causal-sink-hd64-bf16-dkv-bfloat16-v2-long",
        "CPU_ATTN-causal-sink-bf16-tgtmodel.mistralswa-v2",
        "CPU_ATTN-dflash2-causal-sink-bf16-v2",
        "CPU_ATTN-dspark-causal-sink-bf16-v2",
        "CPU_ATTN-noncausal-sink-dheads.8x2-fp32-v2",
    ],
)
def test_the_script_writes_the_lanes_checkpoints_tensor_for_tensor(tmp_path: Path, cell_id: str) -> None:
    """``repro`` lists the tensors without torch (``draft_tensors``, ``target_tensors``); drawn by the
    script, they are what ``checkpoint.write_draft`` and ``write_target`` write for the cell: the same
    configs, names, shapes and values, and the same sink logits for the reference. (The script's
    target has the draft's shape; only its embedding and LM head, which the draft borrows, are read.)"""
    script = tmp_path / "repro.py"
    assert main(["repro", cell_id, "--report", str(_report(tmp_path / "report", cell_id)), "--out", str(script)]) == 0
    namespace: dict[str, object] = {"__name__": "repro"}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    (tmp_path / "script").mkdir()
    written_target = namespace["write_target"](tmp_path / "script")  # type: ignore[operator]
    written_draft, sinks = namespace["write_draft"](tmp_path / "script")  # type: ignore[operator]

    cell = next(c for c in expand(load_matrix(matrix_path("cpu"))) if c.id == cell_id)
    spec, _ = draft_spec(cell.values)
    shape = draft_shape(cell.values, ModelShape(head_dim=repro.CPU_DRAFT_HEAD_DIM))
    truth = checkpoint.write_draft(tmp_path / "lane", spec, shape)
    # The script's target: the draft's head size, the lane's own heads (draft_heads is the draft's alone).
    target_shape = ModelShape(head_dim=shape.head_dim)
    target = checkpoint.write_target(tmp_path / "lane", target_shape, family=str(cell.get("target_model", "qwen3")))
    for ours, lanes in ((written_draft, truth.path), (written_target, target)):
        config = json.loads((ours / "config.json").read_text())
        assert config == json.loads((lanes / "config.json").read_text())
        tensors, expected = torch.load(ours / "pytorch_model.bin"), load_file(lanes / "model.safetensors")
        assert sorted(tensors) == sorted(expected)
        assert all(torch.equal(tensors[name], expected[name]) for name in tensors), ours.name
    assert sinks == (None if truth.sinks is None else [list(layer) for layer in truth.sinks])
    assert repro.WEIGHTED_TARGETS == checkpoint.WEIGHTED_TARGETS
    seeds = (inspect.signature(checkpoint.write_target), inspect.signature(checkpoint.write_draft))
    assert tuple(s.parameters["seed"].default for s in seeds) == (repro.TARGET_SEED, repro.DRAFT_SEED)
