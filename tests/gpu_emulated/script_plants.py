"""Faults planted into vLLM inside a repro script's own process (``python repro.py``), for the
tests that run gpu-emulated scripts for real.

A repro script sets up Triton's interpreter and the simulated platform itself before it imports
vLLM, so a plant can neither import vLLM nor the harness first: ``sitecustomize`` (on the
script's ``PYTHONPATH``, written by the test) calls ``plant_on_import``, which patches the module
right after the script's own import first executes it, as ``selection_lane.pre_fix`` does.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from typing import Any

TRITON_ATTN = "vllm.v1.attention.backends.triton_attn"
# The planted softmax-scale error: 2%, as issue 25's measure of what an fp8 tolerance must catch.
SCALE_ERROR = 1.02


def scale_softmax_in_triton_forward(module: Any) -> None:
    """TRITON_ATTN's forward hands its kernels a softmax scale 2% too large. The impl's own
    ``scale`` is put back after each call, so the layer's settings still read as asked and
    only the kernels' numbers carry the fault."""
    impl = module.TritonAttentionImpl
    forward = impl.forward

    @functools.wraps(forward)
    def planted(self: Any, *args: Any, **kwargs: Any) -> Any:
        honest = self.scale
        self.scale = honest * SCALE_ERROR
        try:
            return forward(self, *args, **kwargs)
        finally:
            self.scale = honest

    impl.forward = planted


class _PlantOnImport(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != TRITON_ATTN:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.loader is not None
        exec_module = spec.loader.exec_module

        def exec_and_plant(module: Any) -> None:
            exec_module(module)
            scale_softmax_in_triton_forward(module)

        spec.loader.exec_module = exec_and_plant  # type: ignore[method-assign]
        return spec


def plant_on_import() -> None:
    sys.meta_path.insert(0, _PlantOnImport())
