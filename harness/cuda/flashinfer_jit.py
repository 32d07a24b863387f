"""What FlashInfer must compile on this host before its first cell, said in one line up front.

Read from flashinfer-python 0.7.2.post1, the release vLLM 0.33.0 pins: its wheel ships CUDA
*sources* (``flashinfer/data/csrc``), not kernels. Every attention module vLLM's FlashInfer
backend uses for a draft (the batch prefill/decode modules, specialised per dtype, head size and
mask; the TRT-LLM launcher ``fmha_gen`` of ``jit/attention/modules.py``) is built on first use
by ``JitSpec.build`` (``jit/core.py``): ninja runs ``$cuda_home/bin/nvcc``, where cuda_home is
``CUDA_HOME``/``CUDA_PATH``, else the folder above ``nvcc`` on PATH, else ``/usr/local/cuda``
(``jit/cpp_ext.get_cuda_path``). Only the ``flashinfer-jit-cache`` package (prebuilt AOT
modules, ``jit/env._get_aot_providers``), which vLLM does not install, skips that. Compiled
modules stay in ``$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`` (default: the home folder),
so only a runner's first run pays, minutes per module; the TRT-LLM cubins are downloaded, not
compiled (``flashinfer_trtllm_kernels`` in the run properties).

Standard library only: the gpu plugin prints this line before any cell process starts.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping
from importlib.util import find_spec
from pathlib import Path

AOT_PACKAGE = "flashinfer_jit_cache"
DEFAULT_CUDA_HOME = "/usr/local/cuda"


def nvcc_path(environ: Mapping[str, str], which: Callable[[str], str | None]) -> str | None:
    """The nvcc FlashInfer's ninja build would run (``jit/cpp_ext.get_cuda_path``), or None."""
    cuda_home = environ.get("CUDA_HOME") or environ.get("CUDA_PATH")
    if cuda_home is None:
        found = which("nvcc")
        cuda_home = str(Path(found).parent.parent) if found else DEFAULT_CUDA_HOME
    nvcc = Path(cuda_home) / "bin" / "nvcc"
    return str(nvcc) if nvcc.is_file() else None


def status_line(has_aot: bool, nvcc: str | None, cache_dir: str) -> str:
    if has_aot:
        return "flashinfer: prebuilt kernels (flashinfer-jit-cache installed); nothing compiles on first use"
    if nvcc is None:
        return (
            "flashinfer: no prebuilt kernels (flashinfer-jit-cache not installed) and no nvcc (CUDA_HOME, PATH, "
            f"{DEFAULT_CUDA_HOME}): every FlashInfer cell will crash where FlashInfer first compiles its module"
        )
    return (
        f"flashinfer: no prebuilt kernels; the first cell of each FlashInfer module compiles it with {nvcc} "
        f"(minutes, once per runner: cached in {cache_dir})"
    )


def status(
    environ: Mapping[str, str] | None = None,
    which: Callable[[str], str | None] = shutil.which,
    has_module: Callable[[str], bool] = lambda name: find_spec(name) is not None,
) -> str:
    env = os.environ if environ is None else environ
    base = env.get("FLASHINFER_WORKSPACE_BASE") or str(Path.home())
    return status_line(has_module(AOT_PACKAGE), nvcc_path(env, which), str(Path(base) / ".cache" / "flashinfer"))
