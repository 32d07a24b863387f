"""A lane without vLLM, for testing the harness itself (runner, plugin, journal, reports).

It behaves as its matrix's ``[options]`` tell it, per cell id, so tests can plant
every kind of fault and check the harness reports each one exactly::

    [options]
    actions = { "FLASH_ATTN-causal-sink" = "abort", "TRITON_ATTN-causal-nosink" = "hang" }

Actions: pass (default), abort, segfault, exit, hang, raise, mismatch, reject,
substitute, lose-request, unavailable. It never stands in for a real lane's evidence.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time
from collections.abc import Mapping

from harness.lanes.protocol import StageLog
from harness.matrix import Cell, Matrix
from harness.observation import Claim, Observation
from harness.verdict import Stage

ACTIONS = (
    "pass",
    "abort",
    "segfault",
    "exit",
    "hang",
    "raise",
    "mismatch",
    "reject",
    "substitute",
    "lose-request",
    "unavailable",
)


class FakeLane:
    name = "fake"

    def __init__(self, matrix: Matrix):
        actions = matrix.options.get("actions", {})
        unknown = sorted(set(actions.values()) - set(ACTIONS))
        if unknown:
            raise ValueError(f"unknown fake actions {unknown}; valid: {', '.join(ACTIONS)}")
        self.actions: dict[str, str] = dict(actions)
        self.pid = os.getpid()

    def environment(self) -> Mapping[str, str]:
        return {"platform": "fake", "device": "none", "python": platform.python_version()}

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        action = self.actions.get(cell.id, "pass")
        requested = cell.requested_backend
        backend = requested or "FAKE_AUTO"
        details = {"pid": self.pid}
        stage_log(Stage.CONFIG)
        if action == "unavailable":
            return Observation(requested, unavailable=f"{requested} is not installed here", details=details)
        stage_log(Stage.SELECT)
        if action == "reject":
            return Observation(requested, rejection=("attention sinks not supported",), claim=Claim(False, ("attention sinks not supported",)))
        stage_log(Stage.BUILD)
        observed = backend
        choice = backend
        if action == "substitute":
            observed = choice = "FAKE_OTHER"
        elif action == "lose-request":
            observed = "FAKE_OTHER"
        stage_log(Stage.FORWARD)
        if action == "abort":
            os.abort()
        if action == "segfault":
            ctypes.string_at(0)
        if action == "exit":
            os._exit(3)
        if action == "hang":
            while True:
                time.sleep(60)
        if action == "raise":
            raise RuntimeError("planted failure in forward")
        stage_log(Stage.COMPARE)
        error = 1.0 if action == "mismatch" else 0.0
        return Observation(
            requested,
            platform_choice=choice,
            observed_backends=(observed, observed),
            max_abs_err=error,
            tolerance=cell.tolerance if cell.tolerance is not None else 1e-3,
            claim=Claim(True),
            details=details,
        )


def create(matrix: Matrix) -> FakeLane:
    return FakeLane(matrix)
