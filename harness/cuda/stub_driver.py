"""The selection lane's stand-in ``libcuda.so.1``, built by the harness itself where needed.

tox's selection env builds it at setup and puts it on ``LD_LIBRARY_PATH``. An env the user
already has (``dflash-matrix run selection`` beside their vLLM) has neither, so the harness
compiles ``harness/cuda/libcuda_stub.c`` with gcc into a cache folder keyed by the source's
hash and loads it by path before vLLM is imported: the dynamic linker then resolves every
later ``libcuda.so.1`` dependency (vLLM's CUDA extensions) to the library already loaded
under that soname.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

STUB_LIBRARY = "libcuda.so.1"
SOURCE = Path(__file__).parent / "libcuda_stub.c"


class StubBuildError(RuntimeError):
    """The stub cannot be built here (one line naming what is missing)."""


def cache_dir() -> Path:
    root = os.environ.get("DFLASH_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dflash-matrix"
    )
    return Path(root)


def stub_path() -> Path:
    """Where the stub built from this harness's source lives (built or not)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    return cache_dir() / f"libcuda-stub-{digest}" / STUB_LIBRARY


def build_stub() -> Path:
    """The stub's path, compiled with gcc first when the cache lacks it."""
    target = stub_path()
    if target.exists():
        return target
    compiler = shutil.which("gcc")
    if compiler is None:
        raise StubBuildError(
            f"gcc not found: the selection lane compiles its stub {STUB_LIBRARY} from {SOURCE.name} "
            f"(install gcc, or put a {STUB_LIBRARY} on LD_LIBRARY_PATH)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built beside its final name and renamed: a concurrent or interrupted build never leaves
    # a half-written library that a later run would load.
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        built = Path(scratch) / STUB_LIBRARY
        command = [compiler, "-O2", "-Wall", "-shared", "-fPIC", f"-Wl,-soname,{STUB_LIBRARY}", "-o", str(built)]
        done = subprocess.run([*command, str(SOURCE)], capture_output=True, text=True, check=False)
        if done.returncode != 0:
            first = (done.stderr.strip().splitlines() or ["no output"])[0]
            raise StubBuildError(f"gcc could not build the stub {STUB_LIBRARY}: {first}")
        os.replace(built, target)
    return target


def load_libcuda() -> ctypes.CDLL:
    """``libcuda.so.1`` from the library path (a driver, or tox's stub), else the cached stub."""
    try:
        return ctypes.CDLL(STUB_LIBRARY)
    except OSError:
        return ctypes.CDLL(str(build_stub()), mode=ctypes.RTLD_GLOBAL)
