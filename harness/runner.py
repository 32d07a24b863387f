"""Runs cells in long-lived child processes, one per process key.

Why a child process: a kernel can segfault, abort, device-assert or hang. The
pytest process (or xdist worker) that owns the journal must survive all of that,
so every cell runs in a child that imports vLLM once and stays warm across cells.
When the child dies the cell is a `crash` at the stage it last logged, when it
stops answering the cell is a `timeout`; either way the child is replaced and the
next cell runs. This works the same with and without pytest-xdist.

Lanes whose cached state depends on a cell axis (the selection lane's simulated
capability) say so in their contract's ``key`` (``harness.lanes.contracts``); cells with
another process key get another child.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import gc
import importlib
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

from harness.expectations import expectations_for
from harness.lanes.protocol import Lane
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.observation import Failure, Observation, one_line
from harness.result import CellResult, decide
from harness.stages import STAGES, Stage
from harness.vllm_release import installed_vllm

# Spawn, never fork: the parent may hold threads (xdist's execnet), and a forked
# copy of a half-initialised CUDA or OpenMP runtime is its own source of crashes.
_CONTEXT = multiprocessing.get_context("spawn")
STARTUP_TIMEOUT_S = 600.0
_NO_STAGE = -1
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# A lane sets details[POISONED] = True when its process can no longer be trusted.
POISONED = "process_poisoned"


def lane_groups_cells(matrix: Matrix) -> bool:
    """True when the matrix's cells need more than one kind of cell process (xdist loadgroup).

    A lane whose cells all share one key (the cpu lane) is served warm by any worker's cell
    process; grouping would put every cell on one worker and leave the others idle."""
    return len({matrix.process_key(cell) for cell in expand(matrix)}) > 1


def create_lane(matrix: Matrix) -> Lane:
    """The lane's module is imported here, in the cell process only: it may import vLLM."""
    module = importlib.import_module(f"harness.lanes.{matrix.lane}")
    lane: Lane = module.create(matrix)
    return lane


def thread_environment() -> dict[str, str]:
    """One OpenMP thread per cell process, unless the user set OMP_NUM_THREADS.

    torch sizes its pool to every core. A cell's tensors are tiny (a few hundred tokens of
    a hidden-128 draft), so a second thread never made a cpu cell faster, while every
    parallel region waits for a thread that another process holds: with xdist workers or
    other jobs on the cores cells became many times slower (figures: benchmarks/README.md).
    Parallelism comes from workers (-n).
    """
    return {} if "OMP_NUM_THREADS" in os.environ else {"OMP_NUM_THREADS": "1"}


def _resolve(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    if not attr:
        raise ValueError(f"plant {spec!r} must be 'package.module:function'")
    function: Callable[..., Any] = getattr(importlib.import_module(module_name), attr)
    return function


def _die_with_parent(parent: int) -> None:
    """A runner killed outright (SIGKILL of the pytest process alone, the OOM killer) must not
    leave a hung cell process behind, holding the GPU the next CI job needs. The kernel's
    parent-death signal works even while the cell hangs in native code holding the GIL."""
    if sys.platform == "linux":
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)


def _serve(
    conn: Connection,
    matrix_path: str,
    plants: Sequence[str],
    options: dict[str, Any],
    stage_slot: Any,
    parent: int,
    environment: dict[str, str],
) -> None:
    """Child process main loop: create the lane once, then run cells as they arrive."""
    _die_with_parent(parent)
    # Before the lane imports anything: OpenMP and torch read their thread counts at start-up.
    os.environ.update(environment)
    def stage_log(stage: Stage) -> None:
        stage_slot.value = STAGES.index(stage.value)

    try:
        matrix = load_matrix(matrix_path).with_options(options)
        lane = create_lane(matrix)
        for plant in plants:
            _resolve(plant)(lane)
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
        stage_slot.value = _NO_STAGE
        started = time.perf_counter()
        try:
            observation = lane.observe(cell, stage_log)
        except Exception as exc:
            stage = Stage(STAGES[stage_slot.value]) if stage_slot.value != _NO_STAGE else Stage.CONFIG
            observation = Observation(
                requested_backend=cell.requested_backend,
                failure=Failure.of(stage, exc),
                details={"traceback": traceback.format_exc(limit=8)},
            )
        elapsed = time.perf_counter() - started
        if not observation.duration_s:
            observation = dataclasses.replace(observation, duration_s=elapsed)
        try:
            conn.send(("observed", observation))
        except Exception as exc:  # pickling fails before a byte is sent: the pipe is still clean
            # A lane put something that cannot cross the process boundary in its observation (a
            # lambda, a handle): the cell says so, instead of the process dying without a word.
            stage = Stage(STAGES[stage_slot.value]) if stage_slot.value != _NO_STAGE else Stage.CONFIG
            why = one_line(f"cannot send the observation to the runner: {type(exc).__name__}: {exc}")
            failure = Failure(stage, "UnsendableObservation", why)
            conn.send(("observed", Observation(cell.requested_backend, failure=failure, duration_s=elapsed)))
        if not frozen:
            _freeze_process_state()
            frozen = True


def _freeze_process_state() -> None:
    """Move what survived the process's first cell out of the garbage collector's reach.

    A lane imports most of vLLM lazily during its first cell (model, loader and backend
    modules: hundreds of thousands of objects), and vLLM's model loader calls gc.collect()
    twice per model it builds; every full collection walks each tracked object that is not
    frozen, several ms a build here. What survives a whole cell is process state (modules,
    caches, a reused target), so freezing it once leaves later collections one cell's
    garbage to walk. It runs after the result is sent, while the runner journals it; only
    objects alive now and dropped later can never be reclaimed, and that is one cell's worth.
    """
    gc.collect()
    gc.freeze()


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
        options: dict[str, Any] | None = None,
        on_environment: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.matrix = matrix
        self.plants = tuple(plants)
        self.options = dict(options or {})
        self.on_environment = on_environment
        self.environment = thread_environment()
        self._child: _Child | None = None
        self._broken: dict[str, str] = {}
        self.restarts = 0

    # -- child lifecycle -------------------------------------------------
    def _start(self, key: str) -> _Child | str:
        parent_conn, child_conn = _CONTEXT.Pipe()
        stage_slot = _CONTEXT.Value("i", _NO_STAGE, lock=False)
        process = _CONTEXT.Process(
            target=_serve,
            args=(
                child_conn,
                str(self.matrix.path),
                self.plants,
                self.options,
                stage_slot,
                os.getpid(),
                self.environment,
            ),
            name=f"dflash-cell-{key}",
            daemon=True,
        )
        process.start()
        child_conn.close()
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

    # -- running ---------------------------------------------------------
    def _ready_child(self, key: str) -> _Child | str:
        """The warm child for this key, started if need be; a string says why none could start."""
        if key in self._broken:
            return self._broken[key]
        if self._child is not None and (self._child.key != key or not self._child.process.is_alive()):
            # A child that died between cells (OOM killer, a runtime's watchdog thread) owes
            # the next cell nothing: that cell gets a fresh process instead of the blame.
            self._retire()
        if self._child is None:
            started = self._start(key)
            if isinstance(started, str):
                self._broken[key] = started
                return started
            self._child = started
        return self._child

    def run(self, cell: Cell) -> Observation:
        key = self.matrix.process_key(cell)
        for _ in range(2):
            child = self._ready_child(key)
            if isinstance(child, str):
                return self._startup_failure(cell, child)
            # The slot still holds the stage the previous cell ended in; a death before this
            # cell logs its first stage must not be reported at that stage.
            child.stage_slot.value = _NO_STAGE
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
                    if observation.details.get(POISONED):
                        # A sticky device error (CUDA illegal memory access) fails every later
                        # call in this process: a fresh process keeps the next cells honest.
                        self._retire()
                        self.restarts += 1
                    return observation
            except EOFError:
                pass
            except Exception as exc:  # received whole, but cannot be rebuilt here (a class only the
                # cell process can import): the child is fine, this cell's report is not.
                stage_index = child.stage_slot.value
                stage = Stage(STAGES[stage_index]) if stage_index != _NO_STAGE else Stage.CONFIG
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
        stage_index = child.stage_slot.value
        stage = Stage(STAGES[stage_index]) if stage_index != _NO_STAGE else Stage.CONFIG
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


def run_matrix(
    matrix: Matrix | str | Path,
    plants: Sequence[str] = (),
    cell_ids: Iterable[str] | None = None,
    options: dict[str, Any] | None = None,
) -> list[CellResult]:
    """Run (some) cells of a matrix outside pytest and judge them: the API planted-fault tests use.

    ``options`` overrides keys of the matrix's [options] table in the cell process.
    """
    if not isinstance(matrix, Matrix):
        matrix = load_matrix(matrix)
    if options:
        matrix = matrix.with_options(options)  # a bad override is refused here, before any cell process
    expectations = expectations_for(matrix, installed_vllm())
    cells = expand(matrix)
    if cell_ids is not None:
        wanted = set(cell_ids)
        unknown = wanted - {cell.id for cell in cells}
        if unknown:
            raise KeyError(f"no such cells in {matrix.path}: {sorted(unknown)}")
        cells = tuple(cell for cell in cells if cell.id in wanted)
    runner = CellRunner(matrix, plants, options=options)
    try:
        ordered = sorted(cells, key=matrix.process_key)
        return [decide(cell, runner.run(cell), expectations.for_cell(cell)) for cell in ordered]
    finally:
        runner.close()
