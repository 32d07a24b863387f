"""Stand-ins for ``torch.cuda`` graphs on the CPU (``harness.attention.graph.GraphApi``).

``EmulatedGraphs`` keeps the one property of a CUDA graph that matters here: a replay re-runs
the captured work on whatever the static buffers hold at replay time. The broken variants (a
replay that repeats the captured result, one that writes nothing) show that a graph cell,
compared against the reference of the refilled inputs, cannot pass by luck.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


class EmulatedGraphs:
    """A faithful replay: the captured step runs again on the current buffer contents."""

    def __init__(self, device: object = None):
        self.calls: list[str] = []

    def warm_up(self, step: Callable[[], torch.Tensor], times: int) -> None:
        self.calls.append(f"warm_up x{times}")
        for _ in range(times):
            step()

    def capture(self, step: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        self.calls.append("capture")
        output = step()

        def replay() -> None:
            self.calls.append("replay")
            step()

        return replay, output

    def synchronize(self) -> None:
        self.calls.append("synchronize")


class StaleGraphs(EmulatedGraphs):
    """A broken replay that writes back what the capture computed (baked-in inputs)."""

    def capture(self, step: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        output = step()
        frozen = output.clone()
        return (lambda: output.copy_(frozen)), output


class SilentGraphs(EmulatedGraphs):
    """A broken replay that launches nothing."""

    def capture(self, step: Callable[[], torch.Tensor]) -> tuple[Callable[[], None], torch.Tensor]:
        return (lambda: None), step()
