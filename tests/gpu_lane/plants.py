"""Plants for the pinning tests: run inside the cell process, they record what it inherited."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


def record_visible_devices(lane: Any) -> None:
    folder = Path(os.environ["DFLASH_TEST_PIN_DIR"])
    (folder / f"cell-process-{os.getpid()}").write_text(
        f"{os.environ.get('PYTEST_XDIST_WORKER', 'main')}={os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}"
    )
