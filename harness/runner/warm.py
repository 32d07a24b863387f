"""A warm parent: one process per cell runner that imports a lane's heavy modules once and
forks every cell process of that runner from there, so a new, replaced or retired process
starts in milliseconds instead of paying vLLM's and torch's import again.

How: the warm parent is started with the spawn context (a fresh interpreter, as a cell
process was), applies the runner's environment, imports what the lane's contract declares
(``Contract.preload``), checks that doing so left nothing a fork would copy wrongly, and then
runs the standard library's fork server loop (``multiprocessing.forkserver.main``). Cell
processes are started through it with the standard forkserver ``Popen``: same pickled
request, same pipe, same shared stage slot, and their exit status is reported by the server,
so the supervisor sees a ``BaseProcess`` exactly as before (``kill``, ``join``, ``exitcode``).

What the warm parent may do is declared once per lane, as data (``harness.contracts.lanes``);
what it must never have done is checked here, for every lane, before the first fork:

- no thread but the main one: ``fork`` copies only the calling thread, so a lock another
  thread held (an import lock, an allocator's, OpenMP's pool) stays locked in every cell;
- CUDA not initialised (``torch.cuda.is_initialized()``): a forked CUDA context is unusable;
- torch never asked for the device count (``DeviceQueries``): answering it initialises the CUDA
  driver, and torch keeps the answer for the process's life, so a count asked here, under the
  runner's ``CUDA_VISIBLE_DEVICES``, would be every cell process's, whatever the cell sets;
- where the lane's contract says so, vLLM's platform not resolved, since the simulated
  platform of the selection and gpu-emulated lanes is per process key.

A failed check, or a preload that raises, does not fork quietly: every cell process it forks
reports it as the lane's start-up failure, so each cell says why.

A lane whose cell processes start by installing something per process key (the selection
lane's simulated GPU, then vLLM imported under it) declares that start as ``Preload.per_key``:
the lane's warm parent then forks one warm parent per process key (``KeyWarmParent``), which
does that start once and forks the key's cell processes. A planted-fault run that meets a key
an earlier run of the same test process met forks its cells from there instead of importing
vLLM again (``SharedWarmParent`` keeps the last few).

Parent death: the warm parent dies with its runner (the kernel's parent-death signal, set as
in ``child``) and also leaves its loop when the runner's end of its "alive" pipe closes; a
cell process's parent is the warm parent, and it dies with it the same way. A runner killed
outright therefore takes the warm parent and its cell process with it.

This module is imported by the warm parent itself: like ``child`` it may import the harness
core and the lane's preload, never the journal, the expectations or the reports.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import io
import multiprocessing
import os
import signal
import socket
import sys
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from multiprocessing import connection, forkserver, popen_forkserver, reduction, resource_tracker, spawn, util
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from multiprocessing.process import BaseProcess
from typing import Any

from harness.axes import AxisValue
from harness.contracts.model import Preload
from harness.runner import child

_SPAWN = multiprocessing.get_context("spawn")
_STOP_TIMEOUT_S = 10.0
# As long as a cell process may take to start (harness.runner.supervisor.STARTUP_TIMEOUT_S).
KEY_START_TIMEOUT_S = 600


def warm_main(
    listener: socket.socket, alive: Connection, preload: Preload, environment: dict[str, str], runner: int
) -> None:
    """The warm parent's whole life: import the preload, check it, then fork cell processes."""
    child.die_with_parent(runner)
    # Before anything is imported: OpenMP and torch read their thread counts at start-up, and
    # what the warm parent imports is what every cell process runs with.
    os.environ.update(environment)
    queries = DeviceQueries()
    try:
        for module in preload.modules:
            if module in preload.optional and importlib.util.find_spec(module.partition(".")[0]) is None:
                continue  # not installed here: the cell processes import it themselves, if at all
            importlib.import_module(module)
            queries.watch()  # from torch's own import on: what a later module asks is seen
        child.preload_failure = fork_hazard(preload, queries.asked)
    except BaseException as exc:  # the cells say why; the warm parent still answers them
        child.preload_failure = f"the warm parent could not import its preload: {type(exc).__name__}: {exc}"
    finally:
        queries.restore()  # the cell processes get torch's own functions back
    # Nothing is frozen here: a cell process freezes what survived its first cell itself
    # (child._freeze_process_state), so its first cell runs under the same collector as a spawned one.
    forkserver.main(listener.detach(), alive.fileno(), [])


def key_main(
    listener: socket.socket, alive: Connection, preload: Preload, values: dict[str, AxisValue], lane_warm: int
) -> None:
    """A process key's warm parent, forked by the lane's: the key's start (``Preload.per_key``,
    with a cell's values), checked as the preload was, then the fork server loop for the key's
    cell processes. A preload failure it inherited stays the reason every cell gives."""
    child.die_with_parent(lane_warm)
    if child.preload_failure is None and preload.per_key is not None:
        # The runner waits for this start before its cell process is forked: a start that hangs
        # (a vLLM import stuck on something) must end as the key's start-up failure, not hang it.
        def too_long(signum: int, frame: object) -> None:
            raise TimeoutError(f"no start within {KEY_START_TIMEOUT_S} s")

        previous = signal.signal(signal.SIGALRM, too_long)
        signal.alarm(KEY_START_TIMEOUT_S)
        try:
            child.resolve(preload.per_key)(values)
            signal.alarm(0)
            child.preload_failure = fork_hazard(preload, per_key=True)
        except BaseException as exc:
            why = f"{type(exc).__name__}: {exc}"
            child.preload_failure = f"the warm parent of this process key could not start it: {why}"
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, previous)
    forkserver.main(listener.detach(), alive.fileno(), [])


class DeviceQueries:
    """Records the preload's calls of torch's device-count entry points (``is_available`` and
    ``device_count`` both end in one of them). Installed once torch is imported, so torch's own
    import is not watched; nothing in the warm parent may ask after that."""

    # (module, attribute): the CUDA runtime's count, and the NVML/AMD-SMI counts torch asks first.
    ENTRY_POINTS = (
        ("torch._C", "_cuda_getDeviceCount"),
        ("torch.cuda", "_device_count_nvml"),
        ("torch.cuda", "_device_count_amdsmi"),
    )

    def __init__(self) -> None:
        self.asked: list[str] = []
        self._originals: list[tuple[Any, str, Any]] = []

    def watch(self) -> None:
        if self._originals or "torch" not in sys.modules:
            return
        for module_name, name in self.ENTRY_POINTS:
            module = sys.modules.get(module_name)
            original = getattr(module, name, None)
            if original is None:
                continue

            def asking(*args: Any, _original: Any = original, _name: str = f"{module_name}.{name}", **kw: Any) -> Any:
                self.asked.append(_name)
                return _original(*args, **kw)

            self._originals.append((module, name, original))
            setattr(module, name, asking)

    def restore(self) -> None:
        for module, name, original in self._originals:
            setattr(module, name, original)
        self._originals.clear()


def fork_hazard(preload: Preload, device_queries: Sequence[str] = (), *, per_key: bool = False) -> str | None:
    """What in this process a fork would copy wrongly, or None. ``per_key``: checked in a process
    key's warm parent, whose start resolved the key's own platform (``Preload.per_key``)."""
    others = [thread.name for thread in threading.enumerate() if thread is not threading.main_thread()]
    if others:
        return f"the warm parent's preload started threads a fork cannot copy: {', '.join(others)}"
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        return "the warm parent's preload initialised CUDA, which a forked process cannot use"
    if device_queries:
        return (
            "the warm parent's preload asked torch for the device count, which a forked process would keep: "
            + ", ".join(dict.fromkeys(device_queries))
        )
    platforms = sys.modules.get("vllm.platforms")
    resolved = platforms is not None and getattr(platforms, "_current_platform", None)
    if not preload.platform_resolved and not per_key and resolved:
        return "the warm parent's preload resolved vLLM's platform, which this lane sets per cell process"
    return None


class _Server(forkserver.ForkServer):
    """The parent's handle on one warm parent's fork server: started by ``WarmParent``, never
    by the standard library's own start-up (that one would spawn it without the preload)."""

    def ensure_running(self) -> None:
        resource_tracker.ensure_running()
        if self._forkserver_alive_fd is None:  # type: ignore[attr-defined]
            raise RuntimeError("the warm parent is not running")


class _Popen(popen_forkserver.Popen):
    """The standard forkserver Popen, asking this runner's warm parent instead of the global one."""

    def __init__(self, process_obj: BaseProcess, server: _Server):
        self.server = server
        super().__init__(process_obj)

    def _launch(self, process_obj: BaseProcess) -> None:
        # popen_forkserver.Popen._launch, with self.server in place of the module's server.
        prep_data = spawn.get_preparation_data(process_obj.name)
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = self.server.connect_to_new_process(self._fds)  # type: ignore[attr-defined]
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))  # type: ignore[attr-defined]
        with open(w, "wb", closefd=True) as pipe:
            pipe.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class ForkedProcess(ForkServerProcess):
    """A cell process forked by a warm parent; the server itself never crosses the pipe."""

    _server: _Server | None = None

    def _Popen(self, process_obj: BaseProcess) -> _Popen:  # type: ignore[override]
        assert self._server is not None
        return _Popen(process_obj, self._server)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_server", None)
        return state


class WarmParent:
    """One warm parent of one cell runner: started on first use, restarted if it dies."""

    def __init__(self, preload: Preload, environment: dict[str, str]):
        self.preload = preload
        self.environment = dict(environment)
        self._process: BaseProcess | None = None
        self._server: _Server | None = None

    def start(self) -> int:
        """The running warm parent's pid: started on first use, and again if it died."""
        if self._process is None or not self._process.is_alive():
            self.close()
            self._start()
        assert self._process is not None and self._process.pid is not None
        return self._process.pid

    def process(self, target: Any, args: tuple[Any, ...], name: str) -> BaseProcess:
        """A cell process (not yet started) that the running warm parent forks when it starts."""
        process = ForkedProcess(target=target, args=args, name=name, daemon=True)
        process._server = self._server
        return process

    def _start(self) -> None:
        listener = socket.socket(socket.AF_UNIX)
        address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
        listener.bind(address)
        os.chmod(address, 0o600)
        listener.listen()
        alive_r, alive_w = os.pipe()
        alive = Connection(alive_r, writable=False)
        try:
            process = self._launch(listener, alive)
        except BaseException:
            os.close(alive_w)
            raise
        finally:
            listener.close()
            alive.close()
        server = _Server()
        server._forkserver_address = address  # type: ignore[attr-defined]
        server._forkserver_alive_fd = alive_w  # type: ignore[attr-defined]
        server._forkserver_pid = process.pid  # type: ignore[attr-defined]
        self._process, self._server = process, server

    def _launch(self, listener: socket.socket, alive: Connection) -> BaseProcess:
        process = _SPAWN.Process(
            target=warm_main,
            args=(listener, alive, self.preload, self.environment, os.getpid()),
            name="dflash-warm-parent",
            daemon=True,
        )
        process.start()
        return process

    def close(self) -> None:
        """Stop the warm parent: closing its alive pipe ends its loop; a cell it forked that
        is still running dies with it."""
        process, server, self._process, self._server = self._process, self._server, None, None
        if server is None or process is None:
            return
        os.close(server._forkserver_alive_fd)  # type: ignore[attr-defined]
        process.join(_STOP_TIMEOUT_S)
        if process.is_alive():
            process.kill()
            process.join(_STOP_TIMEOUT_S)
        address = server._forkserver_address  # type: ignore[attr-defined]
        if not util.is_abstract_socket_namespace(address):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(address)


class KeyWarmParent(WarmParent):
    """The warm parent of one process key of a lane with a per-key start (``Preload.per_key``):
    forked by the lane's warm parent, so it starts with the preload already imported, and
    restarted with it."""

    def __init__(self, lane: WarmParent, key: str, values: Mapping[str, AxisValue]):
        super().__init__(lane.preload, lane.environment)
        self.lane, self.key, self.values = lane, key, dict(values)

    def _launch(self, listener: socket.socket, alive: Connection) -> BaseProcess:
        lane_warm = self.lane.start()
        args = (listener, alive, self.preload, self.values, lane_warm)
        process = self.lane.process(key_main, args, "dflash-warm-key")
        process.start()
        return process


class SharedWarmParent:
    """One warm parent that successive runners of this process fork their cells from, instead
    of each importing the preload again: ``run_matrix`` (every planted-fault test starts one)
    takes it from here. A runner never closes it; it stops when this process exits, or when a
    runner asks for another preload or environment.

    The key holds this process's whole environment, not only the runner's: the warm parent
    imported the preload under the variables set when it started, and a cell process inherits
    them, so a test that sets one (a plant's log file) gets a warm parent started under it.
    At most one is kept: a changed key stops the old one first, so no idle warm parent (a
    vLLM import's worth of memory) outlives its use. Of a lane with a per-key start, the
    warm parents of the last ``KEYS_KEPT`` process keys are kept beside it (``for_key``)."""

    # pytest names the running test here, a new value for every test; no cell reads it.
    VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})
    # A vLLM import under a simulated GPU each (about 1 GB): a test process's planted runs
    # mostly meet SM90 with the cubins and one other generation.
    KEYS_KEPT = 2

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._warm: WarmParent | None = None
        self._keys: OrderedDict[str, KeyWarmParent] = OrderedDict()
        atexit.register(self.close)

    def get(self, preload: Preload, environment: dict[str, str]) -> WarmParent:
        inherited = tuple(sorted(item for item in os.environ.items() if item[0] not in self.VOLATILE))
        key = (preload, tuple(sorted(environment.items())), inherited)
        if self._warm is None or key != self._key:
            self.close()
            self._key, self._warm = key, WarmParent(preload, environment)
        return self._warm

    def for_key(self, lane: WarmParent, key: str, values: Mapping[str, AxisValue]) -> KeyWarmParent | None:
        """The warm parent of process ``key``, forked by ``lane``; None unless ``lane`` is the
        one this shares (``get``)."""
        if lane is not self._warm:
            return None
        if key in self._keys:
            self._keys.move_to_end(key)
            return self._keys[key]
        while len(self._keys) >= self.KEYS_KEPT:
            self._keys.popitem(last=False)[1].close()
        self._keys[key] = KeyWarmParent(lane, key, values)
        return self._keys[key]

    def close(self) -> None:
        while self._keys:
            self._keys.popitem()[1].close()
        warm, self._warm, self._key = self._warm, None, None
        if warm is not None:
            warm.close()


SHARED = SharedWarmParent()
