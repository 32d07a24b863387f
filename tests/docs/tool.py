"""tools/docs_blocks.py, loaded by path: tools/ is a folder of maintenance scripts beside the harness,
not an installed package, so no test environment can import it by name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_PATH = Path(__file__).resolve().parents[2] / "tools" / "docs_blocks.py"
_spec = importlib.util.spec_from_file_location("dflash_matrix_docs_blocks", _PATH)
assert _spec is not None and _spec.loader is not None
docs_blocks = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = docs_blocks  # its dataclasses resolve their module while the class is built
_spec.loader.exec_module(docs_blocks)
