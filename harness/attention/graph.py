"""Capture one backend call in a CUDA graph and replay it, as vLLM's FULL CUDA-graph mode runs
a DFlash draft's attention. Some bugs live only in the replay (vLLM #48167: FlashInfer
non-causal attention went wrong only under CUDA-graph replay), so ``cudagraph=graph`` cells
compare the *replayed* output with the reference.

As Model Runner V2's DFlash speculator does (vLLM 0.33.0
``v1/worker/gpu/spec_decode/dflash/cudagraph.py`` and ``speculator.py``), the graph is captured
once on dummy metadata (``build_for_cudagraph_capture`` over a dummy batch) and then replayed for
real batches, each of whose metadata is first built by the same builder into the same
persistent buffers. A replay must prove that it computed, and computed from what those buffers
hold at replay time: the output buffer is poisoned with NaN before each replay, and each batch
differs from the capture's and from the others in sequence lengths and blocks. Torch only (no
vLLM); the graph API is a parameter so the plumbing is testable on a host without a GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
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


def replay_batches(
    step: Step, loads: Sequence[Callable[[], None]], graphs: GraphApi, warmups: int = WARMUP_RUNS
) -> list[torch.Tensor]:
    """Warm up and capture ``step`` once, then for each batch: ``load`` it (refill the static
    buffers, rebuild its metadata), poison the output, replay. Returns a copy of what each
    replay wrote; compare each with the reference of the batch it loaded. A replay that
    writes nothing leaves NaN; one that computes from anything frozen at capture (inputs,
    lengths, block tables, a stale plan) matches the wrong reference."""
    graphs.warm_up(step, warmups)
    replay, output = graphs.capture(step)
    outputs = []
    for load in loads:
        load()
        output.fill_(float("nan"))
        replay()
        graphs.synchronize()
        outputs.append(output.clone())
    return outputs
