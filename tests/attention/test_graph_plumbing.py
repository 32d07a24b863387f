"""The gpu lane's CUDA-graph plumbing and failure handling, on the CPU with torch alone
(graph API emulated: ``emulated_graphs``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from harness.attention.graph import replay_batches
from harness.cuda.devices import NoDevice
from harness.errors import InputError
from harness.lanes.gpu import host as gpu_host
from harness.lanes.gpu import lane as gpu
from harness.matrix import expand, load_matrix
from harness.stages import Stage

from .emulated_graphs import EmulatedGraphs, SilentGraphs, StaleGraphs

pytestmark = pytest.mark.vllm


class StaticLayer:
    """A stand-in for a prepared layer: static input and output buffers, one kernel."""

    def __init__(self) -> None:
        self.query = torch.randn(6, 4, generator=torch.Generator().manual_seed(1))
        self.weight = torch.randn(4, 4, generator=torch.Generator().manual_seed(2))
        self.output = torch.empty(6, 4)

    def run(self) -> torch.Tensor:
        torch.matmul(self.query, self.weight, out=self.output)
        return self.output


def _replayed(graphs: EmulatedGraphs) -> tuple[torch.Tensor, torch.Tensor]:
    layer = StaticLayer()
    fresh = torch.randn(6, 4, generator=torch.Generator().manual_seed(3))
    (output,) = replay_batches(layer.run, [lambda: layer.query.copy_(fresh)], graphs)
    return output, fresh @ layer.weight


def test_replay_computes_from_the_refilled_buffers() -> None:
    graphs = EmulatedGraphs()
    output, expected = _replayed(graphs)
    torch.testing.assert_close(output, expected)
    assert graphs.calls == ["warm_up x2", "capture", "replay", "synchronize"]


def test_a_replay_of_baked_in_inputs_disagrees_with_the_reference() -> None:
    output, expected = _replayed(StaleGraphs())
    assert float((output - expected).abs().max()) > 0.5


def test_a_replay_that_writes_nothing_leaves_nan() -> None:
    output, _ = _replayed(SilentGraphs())
    assert bool(torch.isnan(output).all())


def _matrix(tmp_path: Path, options: str) -> Path:
    path = tmp_path / "gpu.toml"
    path.write_text(
        '[matrix]\nname = "g"\nlane = "gpu"\n[axes]\nbackend = ["FLASH_ATTN"]\ncausal = [true]\nsink = [true]\n'
        f'cudagraph = ["eager", "graph"]\n[options]\n{options}\n'
    )
    return path


def test_options_are_checked_with_one_line(tmp_path: Path) -> None:
    good = load_matrix(_matrix(tmp_path, "head_dim = 64\nkv_fp8_tolerance = 0.2")).lane_options
    assert (good.head_dim, good.kv_fp8_tolerance) == (64, 0.2)
    with pytest.raises(InputError, match=r"options.heads: unknown gpu lane option \(valid: seed, context_lens"):
        load_matrix(_matrix(tmp_path, "heads = 2"))
    with pytest.raises(InputError, match=r"options\.kv_fp8_tolerance: -1 is not a positive number"):
        load_matrix(_matrix(tmp_path, "kv_fp8_tolerance = -1"))


def test_the_lane_refuses_to_start_without_a_cuda_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("LD_LIBRARY_PATH", "")
    with pytest.raises(NoDevice) as caught:
        gpu.create(load_matrix(_matrix(tmp_path, "")))
    assert caught.value.line().startswith("no CUDA device visible: ")


def _lane(tmp_path: Path) -> gpu.GpuLane:
    lane = object.__new__(gpu.GpuLane)
    lane.matrix = load_matrix(_matrix(tmp_path, ""))
    lane.options = gpu.GpuOptions()
    lane.host = gpu.CudaHost()
    return lane


@pytest.mark.parametrize(
    ("message", "healthy", "stage", "poisoned", "reported_stage"),
    [
        # A sticky error surfacing at the comparison's synchronisation was the forward's.
        ("CUDA error: an illegal memory access was encountered", False, Stage.COMPARE, True, Stage.FORWARD),
        ("CUDA error: device-side assert triggered", True, Stage.FORWARD, True, Stage.FORWARD),
        ("some kernel error", False, Stage.METADATA, True, Stage.METADATA),
        ("Selected backend is not valid", True, Stage.SELECT, False, Stage.SELECT),
    ],
)
def test_sticky_errors_retire_the_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    message: str,
    healthy: bool,
    stage: Stage,
    poisoned: bool,
    reported_stage: Stage,
) -> None:
    monkeypatch.setattr(gpu_host, "_cuda_healthy", lambda: healthy)
    cell = expand(load_matrix(_matrix(tmp_path, "")))[0]
    aftermath = _lane(tmp_path).assess_failure(cell, stage, RuntimeError(message))
    assert aftermath.stage is reported_stage
    assert (aftermath.retire_process is not None) is poisoned


def test_a_failed_graph_capture_retires_the_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_host, "_cuda_healthy", lambda: True)
    cells = expand(load_matrix(_matrix(tmp_path, "")))
    graph = next(c for c in cells if c.get("cudagraph") == "graph")
    eager = next(c for c in cells if c.get("cudagraph") == "eager")
    error = RuntimeError("operation not permitted when stream is capturing")
    assert _lane(tmp_path).assess_failure(graph, Stage.FORWARD, error).retire_process == "failed graph capture"
    assert _lane(tmp_path).assess_failure(eager, Stage.FORWARD, error).retire_process is None
