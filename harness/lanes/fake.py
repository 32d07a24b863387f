"""A lane without vLLM, for testing the harness itself (runner, plugin, journal, reports).

It behaves as its matrix's ``[options]`` tell it, per cell id, so tests can plant
every kind of fault and check the harness reports each one exactly::

    [options]
    actions = { "FLASH_ATTN-causal-sink" = "abort", "TRITON_ATTN-causal-nosink" = "hang" }

Actions (``harness.contracts.lanes.FAKE_ACTIONS``): pass (default), abort, segfault, exit,
hang, raise, mismatch, loader-diff (V1's draft differs from V2's), reject, substitute,
lose-request, lose-setting (a layer carries a window its draft did not ask for), unavailable,
poison (passes, but marks its process as untrustworthy, as a sticky CUDA error does).
``sleep_s = 0.3`` makes every forward stage take that long, so a test can kill a run while it
is mid-matrix. ``device = "fake-h100"`` and ``vllm_version = "0.33.0"`` are
reported in the run's environment as a real lane reports its own. It never stands in
for a real lane's evidence.
"""

from __future__ import annotations

import ctypes
import os
import platform
import time
from collections.abc import Mapping

from harness.contracts.lanes import FakeOptions
from harness.matrix import Cell, Matrix
from harness.observation import Claim, LayerAgreement, LoaderDifferential, Observation
from harness.stages import Stage, StageLog

# Set by prepare_process in a process key's warm parent, as the selection lane's start is: its
# pid and the capability it was started for, reported in each cell's details.
_prepared: tuple[int, str] | None = None


def prepare_process(values: Mapping[str, object]) -> None:
    global _prepared
    _prepared = (os.getpid(), str(values.get("capability")))


class FakeLane:
    def __init__(self, matrix: Matrix):
        self.name = matrix.lane  # fake, or fake_gpu (the same lane under the gpu plugin)
        options: FakeOptions = matrix.lane_options
        self.actions = options.actions
        self.sleep_s = options.sleep_s
        # Reports of several runs (devices, vLLM versions) are tested without GPUs: the fake lane
        # reports the device and vLLM version its matrix names, under the keys the real lanes use.
        self.run_environment = {"device": options.device or "none"}
        if options.vllm_version is not None:
            self.run_environment["vllm"] = options.vllm_version
        self.pid = os.getpid()

    def environment(self) -> Mapping[str, str]:
        return {"platform": "fake", **self.run_environment, "python": platform.python_version()}

    def observe(self, cell: Cell, stage_log: StageLog) -> Observation:
        action = self.actions.get(cell.id, "pass")
        requested = cell.requested_backend
        backend = requested or "FAKE_AUTO"
        # The parent too: a test of warm parents reads it after the cell process is gone.
        details: dict[str, object] = {"pid": self.pid, "ppid": os.getppid()}
        if _prepared is not None:
            details["key_parent"], details["prepared_for"] = _prepared
        stage_log(Stage.CONFIG)
        if action == "unavailable":
            return Observation(requested, unavailable=f"{requested} is not installed here", details=details)
        stage_log(Stage.SELECT)
        if action == "reject":
            reasons = ("attention sinks not supported",)
            return Observation(requested, rejection=reasons, claim=Claim(False, reasons), details=details)
        stage_log(Stage.BUILD)
        observed = backend
        choice = backend
        if action == "substitute":
            observed = choice = "FAKE_OTHER"
        elif action == "lose-request":
            observed = "FAKE_OTHER"
        stage_log(Stage.FORWARD)
        time.sleep(self.sleep_s)
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
        differential = None
        lost = ("layers.0: sliding_window is 64, the draft asked for none",) if action == "lose-setting" else ()
        if action == "loader-diff":
            layer = LayerAgreement("layers.0", "FakeImpl", "FakeImpl", bitwise=False, max_abs_diff=1e-6)
            differential = LoaderDifferential((layer,))
        return Observation(
            requested,
            retire_process="planted: poisoned" if action == "poison" else None,
            platform_choice=choice,
            observed_backends=(observed, observed),
            max_abs_err=error,
            lost_settings=lost,
            tolerance=cell.tolerance if cell.tolerance is not None else 1e-3,
            claim=Claim(True),
            loader_differential=differential,
            details=details,
        )


def create(matrix: Matrix) -> FakeLane:
    return FakeLane(matrix)
