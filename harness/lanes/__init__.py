"""Lanes: one module each, all behind ``harness.lanes.protocol.Lane``.

Imported lazily by name, so that loading a report never imports vLLM.
"""

from __future__ import annotations

import importlib

from harness.lanes.protocol import Lane
from harness.matrix import LANES, Matrix


def create_lane(matrix: Matrix) -> Lane:
    if matrix.lane not in LANES:
        raise ValueError(f"unknown lane {matrix.lane!r}")
    module = importlib.import_module(f"harness.lanes.{matrix.lane}")
    lane: Lane = module.create(matrix)
    return lane
