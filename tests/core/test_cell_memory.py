"""A cell process keeps the memory it frees for its next cell (harness.cell_process.keep_freed_memory):
a large block comes from the heap, not a mapping of its own, and the same block serves the next
request of that size, so a builder's zeroed workspace is not faulted in and zeroed by the kernel
again for every cell."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.process

# In a process of its own: the policy is the process's for its life.
PROBE = textwrap.dedent(
    """
    import ctypes, sys
    from harness.cell_process import keep_freed_memory

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = (ctypes.c_size_t,)
    libc.free.argtypes = (ctypes.c_void_p,)
    size = 394 * 1024 * 1024  # FlashInfer's workspace

    def in_heap(address):
        for line in open("/proc/self/maps"):
            span, *rest = line.split()
            if rest and rest[-1] == "[heap]":
                low, high = (int(part, 16) for part in span.split("-"))
                if low <= address < high:
                    return True
        return False

    if sys.argv[1] == "kept":
        assert keep_freed_memory()
    first = libc.malloc(size)
    where = in_heap(first)
    libc.free(first)
    second = libc.malloc(size)
    print(where, second == first and in_heap(second))
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="glibc's allocator (mallopt) is what the policy sets")
@pytest.mark.parametrize(("policy", "expected"), [("kept", "True True"), ("default", "False False")])
def test_a_large_block_comes_from_the_heap_and_is_reused_only_under_the_policy(policy: str, expected: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE, policy], capture_output=True, text=True, check=True).stdout
    assert out.strip() == expected
