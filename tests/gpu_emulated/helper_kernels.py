"""A Triton kernel that calls a ``@triton.jit`` helper, as vLLM's attention kernels do (cdiv_fn,
find_seq_idx): imported only once the ``host`` fixture has set ``TRITON_INTERPRET=1``."""

import triton
import triton.language as tl


@triton.jit
def twice(x):
    return x * 2


@triton.jit
def twice_plus_one(src, dst, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(dst + offsets, twice(tl.load(src + offsets, mask=mask)) + 1, mask=mask)
