"""CUDA-graph semantics on the host: capture records launches, replay repeats exactly them.

A CUDA graph captures kernel launches, not Python: each kernel's grid and arguments are
frozen at capture (pointers, i.e. tensors by identity, and scalars by value), and a replay
re-runs those launches on whatever the captured memory then holds. A bug that leaves a scalar
frozen at capture, or reallocates a tensor after capture instead of refilling it in place, is
invisible to an eager run and wrong on replay. ``RecordedGraphs`` (the ``GraphApi`` of
``harness.attention.graph`` for a host without a GPU) keeps exactly that:

- during capture, every Triton kernel launch (the interpreter's ``InterpretedFunction.run``)
  is recorded with its grid, its tensor arguments (the objects themselves) and its other
  arguments (their values at capture), and *not* run, as CUDA capture runs nothing;
- every torch operation in the captured step is recorded too (a ``TorchDispatchMode``), with
  the tensors it wrote; a replay runs it again and writes its results into those same tensors,
  as a graph writes into the memory its capture allocated. Views and host syncs: a view is
  kept as the alias it is; ``.item()`` and other host reads raise, as under CUDA capture;
- ``replay`` runs the recorded launches and operations in order, with nothing re-evaluated.

What it cannot model: kernels that are neither Triton nor torch operations (Inductor's C++
kernels for FlexAttention on the CPU, CUDA binaries) are not recorded; ``capture`` refuses a
step that launches nothing it could record.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

Step = Callable[[], torch.Tensor]

# Host reads a CUDA stream cannot do while capturing ("operation not permitted when stream is
# capturing"): a step that needs them cannot be a CUDA graph.
_HOST_SYNCS = {"aten::_local_scalar_dense", "aten::item", "aten::equal", "aten::is_nonzero"}


@dataclass
class _Launch:
    kernel: Any  # triton.runtime.interpreter.InterpretedFunction
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def replay(self, run: Callable[..., Any]) -> None:
        run(self.kernel, *self.args, **self.kwargs)


@dataclass
class _TorchOp:
    func: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    outputs: tuple[torch.Tensor | None, ...]  # fresh results, refilled in place on replay

    def replay(self, run: Callable[..., Any]) -> None:
        results = self.func(*self.args, **self.kwargs)
        results = results if isinstance(results, tuple | list) else (results,)
        for captured, result in zip(self.outputs, results, strict=False):
            if captured is not None and isinstance(result, torch.Tensor):
                captured.copy_(result)


def _frozen(value: Any) -> Any:
    """A launch argument as the graph holds it: tensors by identity, anything else by value."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, list | tuple):
        return type(value)(_frozen(v) for v in value)
    return value


class _Recorder(TorchDispatchMode):
    def __init__(self, entries: list[Any]):
        super().__init__()
        self.entries = entries

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = func._schema.name
        if name in _HOST_SYNCS:
            raise RuntimeError(f"operation not permitted when stream is capturing: {name} reads device memory")
        result = func(*args, **kwargs)
        results = result if isinstance(result, tuple | list) else (result,)
        returns = func._schema.returns
        # An output that aliases an input (a view, an in-place or out= result) needs no copy:
        # the replayed op writes through the same memory. A fresh output is captured memory.
        fresh = tuple(
            r if isinstance(r, torch.Tensor) and (i >= len(returns) or returns[i].alias_info is None) else None
            for i, r in enumerate(results)
        )
        if not (func._schema.is_mutable or any(t is not None for t in fresh)):
            return result
        self.entries.append(_TorchOp(func, tuple(_frozen(a) for a in args), dict(kwargs), fresh))
        return result


class RecordedGraphs:
    """``GraphApi`` with CUDA-graph semantics for Triton kernels interpreted on the host."""

    def __init__(self, device: object = None):
        self.launches = 0

    def warm_up(self, step: Step, times: int) -> None:
        # A GPU warms up to compile and allocate lazily; the interpreter compiles nothing, and
        # one run makes every lazy allocation: more runs would only cost time.
        if times:
            step()

    def capture(self, step: Step) -> tuple[Callable[[], None], torch.Tensor]:
        from triton.runtime.interpreter import InterpretedFunction

        entries: list[Any] = []
        original = InterpretedFunction.run

        def record(kernel: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
            if warmup:
                return
            kwargs = {name: _frozen(value) for name, value in kwargs.items()}
            entries.append(_Launch(kernel, tuple(_frozen(a) for a in args), {"grid": grid, "warmup": False, **kwargs}))

        InterpretedFunction.run = record
        try:
            with _Recorder(entries):
                output = step()
        finally:
            InterpretedFunction.run = original
        kernels = sum(isinstance(entry, _Launch) for entry in entries)
        if not kernels:
            raise RuntimeError("the captured step launched no Triton kernel: nothing a recorded graph could replay")
        self.launches = kernels

        def replay() -> None:
            for entry in entries:
                entry.replay(original)

        return replay, output

    def synchronize(self) -> None:
        return None
