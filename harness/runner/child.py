"""The cell process: create the lane once, then run cells as the supervisor sends them.

This module runs in the child. It may import the harness core the lane needs (matrix,
observation, stages, the lane protocol) and, through ``create_lane``, the lane's module and
so vLLM and torch; never pytest, the journal, the expectations or the reports, which belong
to the parent. Everything about a cell that is not the lane's observation lives here, once:
the stage it is in (shared with the supervisor, which reads it when this process dies), how
long it took, and the exception that escapes the lane.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from harness.cell_process import freeze_process_state, keep_freed_memory
from harness.contracts.lanes import CONTRACTS
from harness.lanes.protocol import Lane
from harness.matrix import Cell, Matrix
from harness.observation import Failure, Observation, one_line
from harness.stages import STAGES, Stage

NO_STAGE = -1
_PR_SET_PDEATHSIG = 1  # linux/prctl.h

# Set by a warm parent (``harness.runner.warm``) whose preload failed or left a fork hazard,
# before it forks: each cell process it forks inherits the reason and reports it.
preload_failure: str | None = None


def stage_at(slot_value: int) -> Stage:
    """The stage a shared slot holds; a cell that logged none is still being configured."""
    return Stage(STAGES[slot_value]) if slot_value != NO_STAGE else Stage.CONFIG


@dataclass(frozen=True)
class ChildRequest:
    """What a cell process needs to serve cells (it crosses the process boundary: plain data). The
    matrix as the parent parsed it, its options applied: the child never reads the file again."""

    matrix: Matrix
    plants: tuple[str, ...]
    parent: int
    environment: dict[str, str]


def create_lane(matrix: Matrix) -> Lane:
    """The lane's module is imported here, in the cell process only: it may import vLLM."""
    module = importlib.import_module(CONTRACTS[matrix.lane].module)
    lane: Lane = module.create(matrix)
    return lane


class _Stages:
    """The stage log handed to the lane: it writes the stage to the slot the supervisor reads."""

    def __init__(self, slot: Any):
        self.slot = slot

    def __call__(self, stage: Stage) -> None:
        self.slot.value = STAGES.index(stage.value)

    def reset(self) -> None:
        self.slot.value = NO_STAGE

    @property
    def current(self) -> Stage:
        return stage_at(self.slot.value)


def serve(conn: Connection, request: ChildRequest, stage_slot: Any) -> None:
    """Child process main loop: create the lane once, then run cells as they arrive."""
    die_with_parent(request.parent)
    # Before the lane imports anything: OpenMP and torch read their thread counts at start-up.
    os.environ.update(request.environment)
    keep_freed_memory()
    stages = _Stages(stage_slot)
    try:
        if preload_failure is not None:
            raise RuntimeError(preload_failure)
        matrix = request.matrix
        isolation = CONTRACTS[matrix.lane].isolation
        lane = create_lane(matrix)
        for plant in request.plants:
            resolve(plant)(lane)
        # Plain str: a str subclass (torch.__version__) would make the runner import torch to unpickle it.
        conn.send(("ready", {str(name): str(value) for name, value in lane.environment().items()}))
    except BaseException as exc:  # the lane cannot start: every cell will say why
        conn.send(("broken", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        return
    frozen = False
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        cell: Cell = message
        stages.reset()
        started = time.perf_counter()
        try:
            if isolation.reset is not None:
                # Looked up per cell: a planted fault may replace it (tests/selection_lane/isolation_plants.py).
                resolve(isolation.reset)()
            observation = lane.observe(cell, stages)
        except Exception as exc:
            observation = _escaped(lane, cell, stages.current, exc)
        elapsed = time.perf_counter() - started
        observation = dataclasses.replace(observation, duration_s=elapsed)
        try:
            conn.send(("observed", observation))
        except Exception as exc:  # pickling fails before a byte is sent: the pipe is still clean
            # A lane put something that cannot cross the process boundary in its observation (a
            # lambda, a handle): the cell says so, instead of the process dying without a word.
            why = one_line(f"cannot send the observation to the runner: {type(exc).__name__}: {exc}")
            failure = Failure(stages.current, "UnsendableObservation", why)
            conn.send(("observed", Observation(cell.requested_backend, failure=failure, duration_s=elapsed)))
        if not frozen:
            # What survived the first cell is process state (modules, caches, a reused target).
            freeze_process_state()
            frozen = True


def _escaped(lane: Lane, cell: Cell, stage: Stage, error: Exception) -> Observation:
    """An exception the lane did not expect: a crash at the stage it escaped from. A lane that
    knows more about its exceptions (a sticky CUDA error) says so through ``assess_failure``."""
    retire = None
    assess = getattr(lane, "assess_failure", None)
    if assess is not None:
        aftermath = assess(cell, stage, error)
        stage, retire = aftermath.stage, aftermath.retire_process
    return Observation(
        requested_backend=cell.requested_backend,
        failure=Failure.of(stage, error),
        retire_process=retire,
        details={"traceback": traceback.format_exc(limit=8)},
    )


def resolve(spec: str) -> Callable[..., Any]:
    """The function ``package.module:function`` names (a plant, a lane's per-key start)."""
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"{spec!r} must be 'package.module:function'")
    function: Callable[..., Any] = getattr(importlib.import_module(module_name), attr)
    return function


def die_with_parent(parent: int) -> None:
    """A runner killed outright (SIGKILL of the pytest process alone, the OOM killer) must not
    leave a hung cell process behind, holding the GPU the next CI job needs. The kernel's
    parent-death signal works even while the cell hangs in native code holding the GIL. A
    cell process forked by a warm parent dies with it, and the warm parent with the runner."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)
