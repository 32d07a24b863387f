"""Change a vLLM module right after it first executes, in this process: the one way the planted
faults and fixes reach processes that set up their own platform before they import vLLM (a repro
script, a cell process). No harness or vLLM import here, for the same reason.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, change: Callable[[ModuleType], None]) -> None:
        self.name, self.change = name, change

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name != self.name:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.loader is not None
        exec_module = spec.loader.exec_module

        def exec_and_change(module: ModuleType) -> None:
            exec_module(module)
            self.change(module)

        spec.loader.exec_module = exec_and_change  # type: ignore[method-assign]
        return spec


def after_import(name: str, change: Callable[[ModuleType], None]) -> None:
    """Call ``change(module)`` once module ``name`` has first executed (once: the finder leaves)."""
    sys.meta_path.insert(0, _AfterImport(name, change))
