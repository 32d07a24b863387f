"""Every host-side patch that lets official CUDA vLLM's Triton kernels run on the CPU, in
Triton's interpreter (``TRITON_INTERPRET=1``), for ``tox -e gpu-emulated``.

Nothing here changes vLLM's code: each patch answers, on the host, a question the kernels or
their wrappers would ask a GPU, or makes the interpreter compute what a GPU computes. Each has
its reason below and a test in ``tests/gpu_emulated/test_interpreted_kernels.py`` that it
behaves as the GPU does (bf16/fp8 rounding equal to torch's own casts, bit-exact cache writes).

Order matters, and ``prepare`` (environment) must run before Triton is imported: ``@triton.jit``
reads ``TRITON_INTERPRET`` when vLLM's kernel modules are imported. ``apply`` runs after
``harness.cuda.simulated.install`` (the simulated compute capability) and before any cell.

Measured on Triton 3.8.0 / torch 2.14.0 / vLLM 0.33.0 (``../shared/research/gpu-emulated``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The interpreter runs each kernel program by program in Python: vLLM's launch code, grids and
# constexpr specialisations are the GPU's, the arithmetic is numpy's (see README: what the
# gpu-emulated lane cannot prove).
ENVIRONMENT = {"TRITON_INTERPRET": "1"}

# fp8 e4m3 saturates at +-448; a GPU's cvt.rn.satfinite clamps there before rounding.
_E4M3_MAX = 448.0


@dataclass(frozen=True)
class HostGpu:
    """What the patches answer for the simulated GPU: its compute capability and SM count.

    ``sm_count`` is an explicit input, never guessed: TritonAttentionMetadataBuilder sizes its
    split-KV (3D) grid from ``current_platform.num_compute_units()`` (16 or 64 segments per
    sequence), and FlashInfer sizes work queues from it.
    """

    capability: tuple[int, int]
    sm_count: int


def prepare() -> None:
    """Before Triton (or vLLM) is imported in this process."""
    import sys

    if "triton" in sys.modules and os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("Triton was imported before TRITON_INTERPRET=1 was set: its kernels would be compiled")
    os.environ.update(ENVIRONMENT)


def apply(gpu: HostGpu) -> Mapping[str, str]:
    """Install every patch; returns what each one is, for the run's properties."""
    _interpreter_bf16_dot()
    _interpreter_rounding()
    _interpreter_language_patched_once()
    _device_capability(gpu.capability)
    _sm_count(gpu.sm_count)
    _flashinfer_impl(gpu.sm_count)
    _host_cache_write()
    _host_fp8_query_quant()
    return dict(PATCHES)


PATCHES: dict[str, str] = {}


def _record(name: str, why: str) -> None:
    PATCHES[name] = why


# -- the interpreter computes what a GPU computes ------------------------------------------


def bf16_bits_to_f32(bits: Any) -> Any:
    """Widen raw bf16 bit patterns (the interpreter's uint16 storage) to fp32: exact."""
    import numpy as np

    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(values: Any) -> Any:
    """Round fp32 to bf16 to nearest even, as a GPU's cvt.rn.bf16.f32 does (through torch)."""
    import numpy as np
    import torch

    rounded = torch.from_numpy(np.ascontiguousarray(values, dtype=np.float32)).to(torch.bfloat16)
    return rounded.view(torch.int16).numpy().view(np.uint16).reshape(np.shape(values))


def f32_to_e4m3_bits(values: Any) -> Any:
    """fp32 to fp8 e4m3 as a GPU's cvt.rn.satfinite.e4m3x2.f32 does: clamp to +-448, round
    to nearest even (through torch's own cast)."""
    import numpy as np
    import torch

    clamped = torch.from_numpy(np.clip(np.asarray(values, dtype=np.float32), -_E4M3_MAX, _E4M3_MAX))
    return clamped.to(torch.float8_e4m3fn).view(torch.uint8).numpy()


def _interpreter_bf16_dot() -> None:
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.create_dot, "_dflash", False):
        return
    import triton.language as tl

    original = builder.create_dot

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        if a.dtype.scalar == tl.bfloat16:
            a = interpreter.TensorHandle(bf16_bits_to_f32(a.data), tl.float32)
        if b.dtype.scalar == tl.bfloat16:
            b = interpreter.TensorHandle(bf16_bits_to_f32(b.data), tl.float32)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    create_dot._dflash = True  # type: ignore[attr-defined]
    builder.create_dot = create_dot
    _record(
        "interpreter bf16 tl.dot",
        "the interpreter keeps bf16 as raw uint16 and multiplies the bit patterns (triton-lang/triton#11584); "
        "bf16 operands are widened to fp32 exactly first, as tensor cores read them",
    )


def _interpreter_language_patched_once() -> None:
    """The interpreter swaps triton.language's builtins (every member of tl, tl.core, tl.math and
    tl.tensor, walked with ``inspect.getmembers``) for interpreted ones on every launch, restoring
    them after, and again, unrestored, on every call of a ``@triton.jit`` helper inside a kernel
    program: a fifth of an interpreted TRITON_ATTN cell's kernel time (py-spy, benchmarks/README.md).
    In a process where every kernel is interpreted nothing needs the originals back, so each
    function's language modules are swapped once and kept: the same functions run, once set up."""
    from triton.runtime import interpreter

    if getattr(interpreter._patch_lang, "_dflash", False):
        return
    original = interpreter._patch_lang
    swapped: set[Any] = set()

    class Kept(interpreter._LangPatchScope):
        def restore(self) -> None:
            """The swap stays for the process's life."""

    def patch_lang_once(fn: Any) -> Any:
        if fn not in swapped:
            original(fn)  # its scope is dropped unrestored, as the helper-call path drops it
            swapped.add(fn)
        return Kept()

    patch_lang_once._dflash = True  # type: ignore[attr-defined]
    patch_lang_once.__wrapped__ = original  # type: ignore[attr-defined]  # benchmarks/interpreter_language.py
    interpreter._patch_lang = patch_lang_once
    _record(
        "interpreter language patched once",
        "Triton's interpreter re-patches triton.language on every launch and helper call (a fifth of the "
        "kernel time); every kernel here is interpreted, so the patch is made once per function and kept",
    )


def _interpreter_rounding() -> None:
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    if getattr(builder.cast_impl, "_dflash", False):
        return
    import numpy as np
    import triton.language as tl

    original_cast = builder.cast_impl
    original_fp_to_fp = builder.create_fp_to_fp
    wide = (tl.float32, tl.float16, tl.float64)

    def as_f32(handle: Any) -> Any:
        if handle.dtype.scalar == tl.bfloat16:
            return bf16_bits_to_f32(handle.data)
        return handle.data.astype(np.float32)

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        if dst_type.scalar == tl.bfloat16 and src.dtype.scalar in wide:
            return interpreter.TensorHandle(f32_to_bf16_bits(src.data.astype(np.float32)), tl.bfloat16)
        return original_cast(self, src, dst_type)

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        if dst_type.scalar == tl.float8e4nv and src.dtype.scalar in (*wide, tl.bfloat16):
            bits = f32_to_e4m3_bits(as_f32(src)).reshape(src.data.shape)
            return interpreter.TensorHandle(bits, tl.float8e4nv)
        return original_fp_to_fp(self, src, dst_type, rounding_mode)

    cast_impl._dflash = True  # type: ignore[attr-defined]
    builder.cast_impl = cast_impl
    builder.create_fp_to_fp = create_fp_to_fp
    _record(
        "interpreter fp32->bf16 and ->fp8 casts",
        "the interpreter truncates fp32->bf16 (a GPU rounds to nearest even) and its fp8 e4m3 rounding differs "
        "from cvt.rn.satfinite in ~6% of values; both round through torch's casts instead",
    )


# -- questions the kernels' wrappers ask a GPU ----------------------------------------------


def _device_capability(capability: tuple[int, int]) -> None:
    import torch

    torch.cuda.get_device_capability = lambda device=None: capability
    _record(
        "torch.cuda.get_device_capability",
        "triton_reshape_and_cache_flash asks it (TILE_SIZE heuristic) of the cache tensor's device; "
        "answered with the simulated capability",
    )


def _sm_count(sm_count: int) -> None:
    from vllm.platforms import cuda

    cuda.CudaPlatform.num_compute_units = classmethod(lambda cls, device_id=0: sm_count)
    _record(
        "CudaPlatform.num_compute_units",
        f"{sm_count} (the simulated GPU's SM count, an explicit input): it sizes TRITON_ATTN's split-KV grid",
    )


def _flashinfer_impl(sm_count: int) -> None:
    from harness.cuda.simulated import allow_host_flashinfer_impl

    allow_host_flashinfer_impl(sm_count)
    _record(
        "FlashInferImpl construction",
        "the target's auto-selected FlashInfer layers (SM100) ask the device for its SM count and allocate a "
        "counter on cuda when built; never run here, they get the explicit SM count and a host buffer",
    )


# -- CUDA-only ops the Triton and Flex paths call, given their GPU contract on the host ------


def _host_cache_write() -> None:
    """FlexAttention writes its cache with the CUDA op ``_C_cache_ops::reshape_and_cache_flash``;
    the CUDA build has no CPU kernel for it. vLLM's Triton reshape-and-cache has the same
    contract (TRITON_ATTN uses it), so the CPU kernel is that one, interpreted."""
    import torch
    import vllm._custom_ops  # noqa: F401  (registers the _C ops)
    from vllm.v1.attention.ops.triton_reshape_and_cache_flash import triton_reshape_and_cache_flash

    if "reshape_and_cache_flash" in PATCHES:
        return
    library = torch.library.Library("_C_cache_ops", "IMPL")
    library.impl("reshape_and_cache_flash", triton_reshape_and_cache_flash, "CPU")
    _LIBRARIES.append(library)
    _record(
        "reshape_and_cache_flash",
        "CUDA-only cache write of FlexAttention: on the CPU, vLLM's Triton reshape-and-cache (same contract)",
    )


def static_fp8_quant(output: Any, input: Any, scale: Any, group_shape: Any = None) -> None:
    """``_C::static_scaled_fp8_quant`` for a per-tensor scale, as its CUDA kernel computes it:
    x / scale, saturated to +-448, rounded to nearest even."""
    import torch

    quantized = (input.float() / scale.float()).clamp(-_E4M3_MAX, _E4M3_MAX).to(torch.float8_e4m3fn)
    output.copy_(quantized.view(output.shape))


def _host_fp8_query_quant() -> None:
    """For an fp8 KV cache the attention layer quantizes the query with
    ``_C::static_scaled_fp8_quant`` (``QuantFP8.forward_cuda``), a CUDA kernel."""
    import torch

    if "static_scaled_fp8_quant" in PATCHES:
        return
    library = torch.library.Library("_C", "IMPL")
    library.impl("static_scaled_fp8_quant", static_fp8_quant, "CPU")
    _LIBRARIES.append(library)
    _record("static_scaled_fp8_quant", "CUDA-only query quantization for fp8 KV caches: the same math on the CPU")


_LIBRARIES: list[Any] = []  # a torch.library.Library unregisters its kernels when collected
