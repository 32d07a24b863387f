"""The parent's side of a cell process: ``CellRunner`` starts one, hands it cells one at a
time, and replaces it when it dies, hangs, asks to be retired or the next cell needs another
process key (``harness.contracts.lanes``: the selection lane's simulated capability).

When the child dies the cell is a ``crash`` at the stage it last logged, when it stops
answering the cell is a ``timeout``; either way the next cell gets a fresh process. Processes
are created in one place, ``launch``: forked by the runner's warm parent
(``harness.runner.warm``), which imported the lane's preload once, or, with
``DFLASH_MATRIX_START=spawn``, spawned cold as a fresh interpreter (the benchmarks' baseline,
and a way out should a warm parent ever be suspected).
"""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

from harness.environment import MATRIX_START
from harness.matrix import Cell, Matrix
from harness.observation import Failure, Observation, one_line
from harness.runner.child import NO_STAGE, ChildRequest, serve, stage_at
from harness.runner.warm import KeyWarmParent, SharedWarmParent, WarmParent
from harness.stages import Stage

# Never a fork of the runner: it may hold threads (xdist's execnet), and a forked copy of a
# half-initialised CUDA or OpenMP runtime is its own source of crashes. A cell process is a
# fork of the warm parent (a spawned interpreter that only imported), or itself spawned.
_CONTEXT = multiprocessing.get_context("spawn")
STARTUP_TIMEOUT_S = 600.0
START_VARIABLE = MATRIX_START.name
START_METHODS = ("warm", "spawn")


def start_method() -> str:
    """How cell processes start: ``warm`` (forked by a warm parent, the default) or ``spawn``."""
    method = os.environ.get(START_VARIABLE, "warm")
    if method not in START_METHODS:
        raise ValueError(f"{START_VARIABLE}={method!r}: not one of {', '.join(START_METHODS)}")
    return method


def thread_environment() -> dict[str, str]:
    """One OpenMP thread per cell process, unless the user set OMP_NUM_THREADS.

    torch sizes its pool to every core. A cell's tensors are tiny (a few hundred tokens of
    a hidden-128 draft), so a second thread never made a cpu cell faster, while every
    parallel region waits for a thread that another process holds: with xdist workers or
    other jobs on the cores cells became many times slower (figures: benchmarks/README.md).
    Parallelism comes from workers (-n).
    """
    return {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": "1"}


def launch(request: ChildRequest, name: str, warm: WarmParent | None) -> tuple[BaseProcess, Connection, Any]:
    """Start one cell process serving ``request``: the process, the parent's end of its pipe,
    and the shared slot holding the stage its current cell is in. Forked by ``warm`` where
    given (its pid becomes the parent the cell process dies with), else spawned."""
    parent_conn, child_conn = _CONTEXT.Pipe()
    stage_slot = _CONTEXT.Value("i", NO_STAGE, lock=False)
    process: BaseProcess
    if warm is None:
        process = _CONTEXT.Process(target=serve, args=(child_conn, request, stage_slot), name=name, daemon=True)
    else:
        request = dataclasses.replace(request, parent=warm.start())
        process = warm.process(serve, (child_conn, request, stage_slot), name)
    process.start()
    child_conn.close()
    return process, parent_conn, stage_slot


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "cell process stopped answering"
    if code < 0:
        try:
            return f"cell process killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"cell process killed by signal {-code}"
    return f"cell process exited with status {code}"


@dataclass
class _Child:
    key: str
    process: BaseProcess
    conn: Connection
    stage_slot: Any
    environment: dict[str, Any]


class CellRunner:
    """Owns at most one child process at a time; replaces it when it dies, hangs or the key changes."""

    def __init__(
        self,
        matrix: Matrix,
        plants: Sequence[str] = (),
        on_environment: Callable[[dict[str, Any]], None] | None = None,
        shared_warm: SharedWarmParent | None = None,
    ):
        self.matrix = matrix
        self.plants = tuple(plants)
        self.on_environment = on_environment
        self.environment = thread_environment()
        # Its own warm parent, stopped by close(); or, where given, one shared with the other
        # runners of this process, which outlives this runner.
        self._shared = shared_warm
        self._warm: WarmParent | None = None
        # A lane with a per-key start (Preload.per_key): the warm parent of the key running now,
        # forked by the lane's; or, where shared, the shared one's.
        self._key_warm: KeyWarmParent | None = None
        if start_method() == "warm":
            preload = matrix.contract.preload
            shared = shared_warm.get(preload, self.environment) if shared_warm else None
            self._warm = shared or WarmParent(preload, self.environment)
        self._child: _Child | None = None
        self._broken: dict[str, str] = {}
        self.restarts = 0

    # -- child lifecycle -------------------------------------------------
    def _warm_for(self, key: str, cell: Cell) -> WarmParent | None:
        """The warm parent a cell process of ``key`` forks from."""
        if self._warm is None or self._warm.preload.per_key is None:
            return self._warm
        shared = self._shared.for_key(self._warm, key, cell.values) if self._shared is not None else None
        if shared is not None:
            return shared
        if self._key_warm is None or self._key_warm.key != key or self._key_warm.lane is not self._warm:
            if self._key_warm is not None:
                self._key_warm.close()
            self._key_warm = KeyWarmParent(self._warm, key, cell.values)
        return self._key_warm

    def _start(self, key: str, cell: Cell) -> _Child | str:
        request = ChildRequest(
            matrix=self.matrix,
            plants=self.plants,
            parent=os.getpid(),
            environment=self.environment,
        )
        try:
            process, parent_conn, stage_slot = launch(request, f"dflash-cell-{key}", self._warm_for(key, cell))
        except (EOFError, OSError) as exc:  # it asked a warm parent that died before forking it
            return f"lane failed to start: its warm parent died before forking it ({type(exc).__name__}: {exc})"
        if not parent_conn.poll(STARTUP_TIMEOUT_S):
            self._kill(process)
            return f"lane did not start within {STARTUP_TIMEOUT_S:.0f} s"
        try:
            message = parent_conn.recv()
        except EOFError:
            process.join(5)
            return f"lane failed to start: {_describe_exit(process.exitcode)}"
        if message[0] == "broken":
            process.join(5)
            return f"lane failed to start: {message[1]}"
        environment = message[1]
        if self.on_environment is not None:
            self.on_environment(environment)
        return _Child(key, process, parent_conn, stage_slot, environment)

    @staticmethod
    def _kill(process: BaseProcess) -> None:
        process.kill()
        process.join(10)

    def _retire(self) -> None:
        child, self._child = self._child, None
        if child is None:
            return
        with contextlib.suppress(OSError):  # it may be dead already
            child.conn.send(None)
        child.process.join(10)
        if child.process.is_alive():
            self._kill(child.process)
        child.conn.close()

    def close(self) -> None:
        self._retire()
        if self._key_warm is not None:
            self._key_warm.close()
        if self._warm is not None and self._shared is None:
            self._warm.close()

    # -- running ---------------------------------------------------------
    def _ready_child(self, key: str, cell: Cell) -> _Child | str:
        """The warm child for this key, started if need be; a string says why none could start."""
        if key in self._broken:
            return self._broken[key]
        if self._child is not None and (self._child.key != key or not self._child.process.is_alive()):
            # A child that died between cells (OOM killer, a runtime's watchdog thread) owes
            # the next cell nothing: that cell gets a fresh process instead of the blame.
            self._retire()
        if self._child is None:
            started = self._start(key, cell)
            if isinstance(started, str):
                self._broken[key] = started
                return started
            self._child = started
        return self._child

    def run(self, cell: Cell) -> Observation:
        key = self.matrix.process_key(cell)
        for _ in range(2):
            child = self._ready_child(key, cell)
            if isinstance(child, str):
                return self._startup_failure(cell, child)
            # The slot still holds the stage the previous cell ended in; a death before this
            # cell logs its first stage must not be reported at that stage.
            child.stage_slot.value = NO_STAGE
            try:
                child.conn.send(cell)
                break
            except OSError:  # it died after the liveness check, still before this cell began
                self._retire()
        else:
            return self._startup_failure(cell, "cell process died twice before the cell began")
        began = time.perf_counter()
        if child.conn.poll(cell.timeout_s):
            try:
                kind, observation = child.conn.recv()
                if kind == "observed":
                    if observation.retire_process:
                        # A sticky device error (CUDA illegal memory access) fails every later
                        # call in this process: a fresh process keeps the next cells honest.
                        self._retire()
                        self.restarts += 1
                    return observation
            except EOFError:
                pass
            except Exception as exc:  # received whole, but cannot be rebuilt here (a class only the
                # cell process can import): the child is fine, this cell's report is not.
                stage = stage_at(child.stage_slot.value)
                why = one_line(f"cannot read the cell's observation: {type(exc).__name__}: {exc}")
                return Observation(
                    cell.requested_backend,
                    failure=Failure(stage, "UnreadableObservation", why),
                    duration_s=time.perf_counter() - began,
                )
            child.process.join(10)
            elapsed = time.perf_counter() - began
            return self._lost(cell, _describe_exit(child.process.exitcode), elapsed, timed_out=False)
        return self._lost(cell, f"no result after {cell.timeout_s:g} s", time.perf_counter() - began, timed_out=True)

    def _lost(self, cell: Cell, why: str, elapsed: float, timed_out: bool) -> Observation:
        child = self._child
        assert child is not None
        stage = stage_at(child.stage_slot.value)
        if child.process.is_alive():
            self._kill(child.process)
        self._child = None
        self.restarts += 1
        kind = "Timeout" if timed_out else "ProcessDied"
        return Observation(
            requested_backend=cell.requested_backend,
            failure=Failure(stage, kind, f"{why} during stage {stage.value}"),
            timed_out=timed_out,
            duration_s=elapsed,
            details={"process_key": child.key, "exitcode": child.process.exitcode},
        )

    @staticmethod
    def _startup_failure(cell: Cell, why: str) -> Observation:
        return Observation(requested_backend=cell.requested_backend, failure=Failure(Stage.CONFIG, "LaneStartup", why))
