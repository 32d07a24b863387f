"""What a cell process does to itself whatever its lane: keep its long-lived state out of the
garbage collector's reach, keep the memory it frees for its next cell, and start each cell from
the same vLLM process state.

A lane imports most of vLLM lazily (model, loader and backend modules: hundreds of thousands
of objects), and vLLM's model loader calls ``gc.collect()`` twice per model it builds; every
full collection walks each tracked object that is not frozen. Frozen, those passes walk only
what the build allocated (benchmarks/README.md has the figures). The runner freezes once the
first cell is done (``harness.runner.child``); a lane that sets up its per-process vLLM state
before its first model build freezes then as well. Only objects alive at a freeze and dropped
later can never be reclaimed.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import sys
from types import ModuleType
from typing import Any


def freeze_process_state() -> None:
    gc.collect()
    gc.freeze()


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_KEEP_UP_TO_BYTES = 2**31 - 1  # mallopt takes an int


def keep_freed_memory() -> bool:
    """Serve every allocation from the heap and keep what is freed there, for the next cell.

    Each cell builds its models and backends anew, and some builders allocate a large zeroed
    buffer each time (FlashInfer's metadata builder: a 394 MiB workspace, ``torch.zeros``, for
    every builder of every FlashInfer cell). glibc serves an allocation that large with a fresh
    ``mmap`` and unmaps it when freed, so every cell faulted in and the kernel zeroed each page
    again before torch zeroed it once more: a FlashInfer selection cell took about three times
    as long as a cell without one (benchmarks/README.md). With mmap off and the heap never
    unmapped (up to 2 GiB of it), the next cell reuses the same pages. Only where memory comes from
    changes, never what a tensor holds or what vLLM is told (the lanes answer its questions
    about memory from their declared machine), so no verdict can move. Not glibc: a no-op.
    """
    if sys.platform != "linux":
        return False
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)  # the C library the process runs on
    if mallopt is None:  # musl has none
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _KEEP_UP_TO_BYTES))


# The type of what ``functools.cache`` and ``functools.lru_cache`` return (the C wrapper), asked of
# functools itself: an isinstance check, because ``getattr(x, "cache_clear")`` on an arbitrary
# module attribute can do anything (ctypes' ``cdll`` tries to load a library of that name).
_CACHE_WRAPPER = type(functools.lru_cache(maxsize=None)(lambda: None))


def _cached_functions(module: ModuleType) -> list[Any]:
    """The functools caches a module holds at its top level and in the classes it defines."""
    found: list[Any] = []
    for value in list(vars(module).values()):
        candidates = [value]
        if isinstance(value, type) and value.__module__ == module.__name__:
            candidates = [
                member.__func__ if isinstance(member, classmethod | staticmethod) else member
                for member in vars(value).values()
            ]
        found.extend(candidate for candidate in candidates if isinstance(candidate, _CACHE_WRAPPER))
    return found


class ProcessCaches:
    """Every functools cache (``@cache``, ``@lru_cache``) in the loaded modules of the packages
    named, cleared before each cell.

    vLLM memoises answers per process: the attention selector (``_cached_get_attn_backend``,
    keyed on the backend, the selector config, num_heads and the KV dtype, while the backends'
    validation also reads the current config), the platform's backend priorities, FlashInfer
    and config helpers. A cell process serves many cells; a cleared cache makes each cell start
    from what a fresh process would answer (docs/explanation/isolation.md has the audit). A
    module is scanned when first seen and again whenever its namespace grew or shrank (a module
    imported by the last cell, a cache a plant or vLLM added since).
    """

    def __init__(self, packages: tuple[str, ...]):
        self.packages = packages
        self._seen: dict[str, tuple[int, list[Any]]] = {}  # module -> (namespace size, its caches)

    def _scan(self) -> list[Any]:
        found: dict[int, Any] = {}  # a cache re-exported by another module (vllm.config's names) is one
        for name, module in list(sys.modules.items()):
            if module is None or not any(name == p or name.startswith(f"{p}.") for p in self.packages):
                continue
            size = len(vars(module))
            seen = self._seen.get(name)
            if seen is None or seen[0] != size:
                seen = self._seen[name] = (size, _cached_functions(module))
            found.update((id(function), function) for function in seen[1])
        return list(found.values())

    def clear(self) -> int:
        """Clear every cache found; the number cleared."""
        functions = self._scan()
        for function in functions:
            function.cache_clear()
        return len(functions)


_VLLM_CACHES = ProcessCaches(("vllm",))


def reset_vllm_caches() -> None:
    """A lane contract's per-cell reset (``Isolation``): vLLM's process-level caches cleared."""
    _VLLM_CACHES.clear()
