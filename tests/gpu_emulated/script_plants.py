"""Faults planted into vLLM inside a repro script's own process (``python repro.py``), for the
tests that run gpu-emulated scripts for real.

A repro script sets up Triton's interpreter and the simulated platform itself before it imports
vLLM, so a plant can neither import vLLM nor the harness first: ``sitecustomize`` (on the
script's ``PYTHONPATH``, written by the test) calls ``plant_on_import``, which patches the module
right after the script's own import first executes it, as ``selection_lane.pre_fix`` does.
"""

from __future__ import annotations

import functools
from typing import Any

from selection_lane.on_import import after_import

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


def plant_on_import() -> None:
    after_import(TRITON_ATTN, scale_softmax_in_triton_forward)
