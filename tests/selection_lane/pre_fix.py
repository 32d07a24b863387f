"""The Model Runner V2 DFlash loader as it was before vLLM PR #46770, rebuilt from the installed one.

The fix added one argument to the draft config's ``replace(...)``:
``backend=speculative_config.attention_backend``. ``install_pre_fix_loader`` compiles a copy
of the installed ``load_dflash_model`` without that line and puts it where callers find it.
No harness import here: ``plant_on_import`` also serves processes that are not a lane's (a
repro script), which must import vLLM only after their own platform set-up.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import inspect
from pathlib import Path
from typing import Any

from packaging.version import Version

from .on_import import after_import

FIX_LINE = "backend=speculative_config.attention_backend,"
MODULE = "vllm.v1.worker.gpu.spec_decode.dflash.utils"
# The installed release, read from its metadata (importing vLLM here would resolve its platform).
VLLM = Version(importlib.metadata.version("vllm"))
FIXED_IN = Version("0.25")  # the release PR #46770 landed in
BEFORE_FIX = VLLM.release < FIXED_IN.release


def _has_v1_proposer() -> bool:
    # Found on disk, not imported (see VLLM above): vLLM 0.34.0 removed vllm/v1/spec_decode/dflash.py.
    spec = importlib.util.find_spec("vllm")
    return spec is not None and any(
        (Path(folder) / "v1" / "spec_decode" / "dflash.py").is_file()
        for folder in spec.submodule_search_locations or ()
    )


# Whether the installed release has Model Runner V1's DFlash proposer (the lane's v1 loader); the
# lane answers a v1 cell of a release without it with this line, before the platform is asked.
HAS_V1 = _has_v1_proposer()
LACKS_V1 = "this vLLM release lacks vllm.v1.spec_decode.dflash.DFlashProposer"


def rebuild_without(module: Any, function: str, line: str) -> None:
    """Replace ``module.function`` with a copy of its installed source minus one ``line``."""
    rebuild_replacing(module, function, line, None)


def rebuild_replacing(
    module: Any, function: str, line: str, replacement: str | None, names: dict[str, Any] | None = None
) -> None:
    """Replace ``module.function`` with a copy of its installed source where one ``line`` (its
    stripped text, found exactly once) reads ``replacement`` (None: dropped); ``names`` are added
    to the namespace the copy runs in."""
    lines = inspect.getsource(getattr(module, function)).splitlines(keepends=True)
    found = [i for i, each in enumerate(lines) if each.strip() == line]
    if len(found) != 1:
        raise RuntimeError(f"this vLLM's {function} has no line {line!r}: cannot rebuild it without")
    (index,) = found
    indent = lines[index][: len(lines[index]) - len(lines[index].lstrip())]
    lines[index : index + 1] = [] if replacement is None else [f"{indent}{replacement}\n"]
    namespace = dict(vars(module)) | (names or {})
    exec(compile("".join(lines), module.__file__ or function, "exec"), namespace)
    setattr(module, function, namespace[function])


def install_pre_fix_loader() -> None:
    import vllm.v1.worker.gpu.spec_decode.dflash.utils as loader_module

    rebuild_without(loader_module, "load_dflash_model", FIX_LINE)


def plant_on_import() -> None:
    after_import(MODULE, lambda module: install_pre_fix_loader())
