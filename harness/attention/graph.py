"""Capture one backend call in a CUDA graph and replay it, as vLLM's FULL CUDA-graph mode runs
a DFlash draft's attention. Some bugs live only in the replay (vLLM #48167: FlashInfer
non-causal attention went wrong only under CUDA-graph replay), so ``cudagraph=graph`` cells
compare the *replayed* output with the reference.

A replay must prove that it computed, and computed from what its buffers hold at replay time:
after the capture the output buffer is poisoned with NaN, the static inputs are refilled with
values the capture never saw, and only then is the graph replayed. Torch only (no vLLM); the
graph API is a parameter so the plumbing is testable on a host without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

GRAPH = "graph"
EAGER = "eager"
WARMUP_RUNS = 2  # Triton/JIT compilation and lazy workspace allocation must happen before capture

Step = Callable[[], torch.Tensor]


class GraphApi(Protocol):
    def warm_up(self, step: Step, times: int) -> None: ...

    def capture(self, step: Step) -> tuple[Callable[[], None], torch.Tensor]:
        """Record ``step`` without relying on its results; return (replay, static output)."""
        ...

    def synchronize(self) -> None: ...


class CudaGraphs:
    """``torch.cuda.CUDAGraph`` on one device, with the warm-up torch's documentation asks for."""

    def __init__(self, device: torch.device):
        self.device = device

    def warm_up(self, step: Step, times: int) -> None:
        # On a side stream, as torch.cuda.graph's own warm-up does: the capture stream must
        # not inherit allocations or work the warm-up left on the default stream.
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(times):
                step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        torch.cuda.synchronize(self.device)

    def capture(self, step: Step) -> tuple[Callable[[], None], torch.Tensor]:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            output = step()
        return graph.replay, output

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)


def capture_and_replay(
    step: Step, refill: Callable[[], None], graphs: GraphApi, warmups: int = WARMUP_RUNS
) -> torch.Tensor:
    """Warm up, capture ``step``, poison its output, ``refill`` the static inputs, replay.

    Returns a copy of what the replay wrote; compare it with the reference of the refilled
    inputs. A replay that writes nothing leaves NaN; one that replays the captured inputs
    matches the wrong reference.
    """
    graphs.warm_up(step, warmups)
    replay, output = graphs.capture(step)
    output.fill_(float("nan"))
    refill()
    replay()
    graphs.synchronize()
    return output.clone()
