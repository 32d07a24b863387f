"""``RecordedGraphs`` keeps a CUDA graph's semantics on the host: a replay re-runs exactly the
captured launches, so a scalar frozen at capture or a tensor reallocated after it is stale on
replay, while buffers refilled in place are seen."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from harness.attention.graph import replay_batches
from harness.attention.recorded_graphs import RecordedGraphs

pytestmark = pytest.mark.vllm


def _scale_kernel() -> Any:
    import triton
    import triton.language as tl

    @triton.jit
    def scale(src, dst, factor, n, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask) * factor, mask=mask)

    return scale


class Layer:
    """A step as a layer's forward: static input/output buffers, a scalar and a kernel."""

    def __init__(self) -> None:
        self.kernel = _scale_kernel()
        self.src = torch.zeros(8)
        self.dst = torch.zeros(8)
        self.factor = 2.0

    def step(self) -> torch.Tensor:
        # A torch op in the step too: recorded, and replayed into the same output tensor.
        doubled = self.src * 1.0
        self.kernel[(1,)](doubled, self.dst, self.factor, 8, BLOCK=8)
        return self.dst


def _replay(layer: Layer, load: Any) -> torch.Tensor:
    (output,) = replay_batches(layer.step, [load], RecordedGraphs())
    return output


def test_buffers_refilled_in_place_are_seen(host: Any) -> None:
    layer = Layer()
    fresh = torch.arange(8.0)
    assert torch.equal(_replay(layer, lambda: layer.src.copy_(fresh)), fresh * 2.0)


def test_a_scalar_changed_after_capture_stays_frozen(host: Any) -> None:
    layer = Layer()
    fresh = torch.arange(8.0)

    def load() -> None:
        layer.src.copy_(fresh)
        layer.factor = 3.0  # what a new batch would pass; the graph holds 2.0

    assert torch.equal(_replay(layer, load), fresh * 2.0)


def test_a_tensor_reallocated_after_capture_is_not_read(host: Any) -> None:
    layer = Layer()
    fresh = torch.arange(8.0)

    def load() -> None:
        layer.src = fresh.clone()  # a new tensor: the graph still reads the captured one

    assert torch.equal(_replay(layer, load), torch.zeros(8))


def test_capture_runs_nothing_and_refuses_host_reads(host: Any) -> None:
    layer = Layer()
    layer.src.fill_(1.0)
    graphs = RecordedGraphs()
    layer.dst.fill_(-1.0)
    graphs.capture(layer.step)
    assert torch.equal(layer.dst, torch.full((8,), -1.0)), "a CUDA capture launches nothing"
    assert graphs.launches == 1

    def reads_the_device() -> torch.Tensor:
        layer.step()
        if layer.dst.sum().item() > 0:  # a host sync: illegal while a stream captures
            layer.dst.zero_()
        return layer.dst

    with pytest.raises(RuntimeError, match="not permitted when stream is capturing"):
        graphs.capture(reads_the_device)
