"""Each host patch of ``harness.cuda.interpreted_kernels`` computes what a GPU computes: the
interpreter's bf16 and fp8 rounding equal torch's own casts (a GPU's cvt.rn), the cache
write is bit-exact, the fp8 query quantization equals the cast its CUDA kernel does, and the
device queries answer for the simulated GPU."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from harness.contracts.lanes import DEFAULT_SM_COUNTS
from harness.cuda import interpreted_kernels

pytestmark = pytest.mark.vllm


def _values(n: int = 4096) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    # Spread over many binades, with exact ties and values past fp8's +-448.
    return torch.cat(
        [
            torch.randn(n, generator=g) * 10.0 ** torch.randint(-3, 3, (n,), generator=g),
            torch.tensor([500.0, -1e4, 0.0]),
        ]
    )


def test_bf16_and_fp8_rounding_equal_torch_casts(host: Any) -> None:
    values = _values()
    bf16 = interpreted_kernels.f32_to_bf16_bits(values.numpy())
    assert np.array_equal(bf16, values.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16))
    widened = interpreted_kernels.bf16_bits_to_f32(bf16)
    assert np.array_equal(widened, values.to(torch.bfloat16).float().numpy())
    e4m3 = interpreted_kernels.f32_to_e4m3_bits(values.numpy())
    expected = values.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert np.array_equal(e4m3, expected)


def _interpreted_cast(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A Triton kernel that loads fp32 and stores ``dtype``, run by the (patched) interpreter."""
    import triton
    import triton.language as tl

    @triton.jit
    def cast(src, dst, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        tl.store(dst + offsets, tl.load(src + offsets, mask=mask).to(dst.dtype.element_ty), mask=mask)

    out = torch.empty(values.shape, dtype=dtype)
    cast[(triton.cdiv(values.numel(), 256),)](values, out, values.numel(), BLOCK=256)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float8_e4m3fn])
def test_interpreter_casts_round_like_a_gpu(host: Any, dtype: torch.dtype) -> None:
    values = _values().clamp(-448, 448) if dtype == torch.float8_e4m3fn else _values()
    got = _interpreted_cast(values, dtype)
    want = values.to(dtype)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_interpreter_bf16_dot_multiplies_values_not_bit_patterns(host: Any) -> None:
    import triton
    import triton.language as tl

    @triton.jit
    def dot(a, b, c, N: tl.constexpr):
        rows = tl.arange(0, N)[:, None] * N + tl.arange(0, N)[None, :]
        tl.store(c + rows, tl.dot(tl.load(a + rows), tl.load(b + rows)))

    g = torch.Generator().manual_seed(1)
    a, b = (torch.randn(16, 16, generator=g).to(torch.bfloat16) for _ in range(2))
    c = torch.empty(16, 16)
    dot[(1,)](a, b, c, N=16)
    torch.testing.assert_close(c, a.float() @ b.float(), rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize(("dtype", "kv_cache_dtype"), [(torch.bfloat16, "auto"), (torch.bfloat16, "fp8")])
def test_cache_write_is_bit_exact(host: Any, dtype: torch.dtype, kv_cache_dtype: str) -> None:
    """vLLM's Triton reshape-and-cache, interpreted, writes exactly what a torch scatter of the
    (scaled, rounded) values writes."""
    from vllm.v1.attention.ops.triton_reshape_and_cache_flash import triton_reshape_and_cache_flash

    g = torch.Generator().manual_seed(2)
    blocks, block_size, heads, head_dim, tokens = 6, 16, 2, 64, 40
    key, value = (torch.randn(tokens, heads, head_dim, generator=g).to(dtype) for _ in range(2))
    slots = torch.randperm(blocks * block_size, generator=g)[:tokens]
    fp8 = kv_cache_dtype == "fp8"
    cache_dtype = torch.float8_e4m3fn if fp8 else dtype
    storage = torch.zeros(blocks, heads, block_size, 2 * head_dim, dtype=torch.uint8 if fp8 else dtype)
    key_cache, value_cache = storage.transpose(1, 2).split(head_dim, dim=-1)
    k_scale, v_scale = torch.tensor(0.5), torch.tensor(0.25)
    triton_reshape_and_cache_flash(key, value, key_cache, value_cache, slots, kv_cache_dtype, k_scale, v_scale)
    for written, source, scale in ((key_cache, key, k_scale), (value_cache, value, v_scale)):
        expected = torch.zeros(blocks * block_size, heads, head_dim, dtype=cache_dtype)
        expected[slots] = (source.float() / scale).to(cache_dtype) if fp8 else source
        got = written.reshape(blocks * block_size, heads, head_dim)
        got = got.view(cache_dtype) if fp8 else got
        assert torch.equal(got.view(torch.uint8), expected.view(torch.uint8))


def test_fp8_query_quantization_equals_the_cuda_kernels_cast(host: Any) -> None:
    from vllm import _custom_ops as ops

    query = _values(1021).reshape(64, 16).to(torch.bfloat16)
    scale = torch.tensor([1.0])
    got, _ = ops.scaled_fp8_quant(query, scale)
    want = (query.float() / scale).clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))


def test_the_language_patched_once_serves_every_launch_and_helper_call(host: Any) -> None:
    """Triton's language swap, made once per function and kept: a kernel calling a jit helper
    computes the same on its first and a later launch, another kernel launched in between
    too, and no launch or helper call swaps the language again."""
    import triton
    from triton.runtime import interpreter

    from . import helper_kernels

    swaps: list[Any] = []
    original = interpreter._LangPatchScope.set_attr

    def counted(scope: Any, obj: object, name: str, value: object) -> None:
        swaps.append(name)
        original(scope, obj, name, value)

    def launch(values: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(values)
        helper_kernels.twice_plus_one[(triton.cdiv(values.numel(), 64),)](values, out, values.numel(), BLOCK=64)
        return out

    first, second = torch.arange(100, dtype=torch.float32), torch.linspace(-3, 3, 70)
    assert torch.equal(launch(first), first * 2 + 1)
    interpreter._LangPatchScope.set_attr = counted
    try:
        assert torch.equal(_interpreted_cast(_values(), torch.bfloat16), _values().to(torch.bfloat16))
        swaps_by_a_new_kernel = len(swaps)
        assert torch.equal(launch(second), second * 2 + 1)
    finally:
        interpreter._LangPatchScope.set_attr = original
    assert swaps_by_a_new_kernel > 0  # a function seen first is swapped for (once)
    assert len(swaps) == swaps_by_a_new_kernel, swaps[swaps_by_a_new_kernel:][:5]


def test_device_queries_answer_for_the_simulated_gpu(host: Any) -> None:
    from vllm.platforms import current_platform

    assert torch.cuda.get_device_capability(torch.device("cpu")) == (9, 0)
    assert current_platform.num_compute_units() == DEFAULT_SM_COUNTS["9.0"] == host.sm_count
    assert set(interpreted_kernels.PATCHES) == {
        "interpreter bf16 tl.dot",
        "interpreter fp32->bf16 and ->fp8 casts",
        "interpreter language patched once",
        "torch.cuda.get_device_capability",
        "CudaPlatform.num_compute_units",
        "FlashInferImpl construction",
        "reshape_and_cache_flash",
        "static_scaled_fp8_quant",
    }
