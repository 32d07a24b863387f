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
import socket
import sys
import threading
from collections.abc import Sequence
from multiprocessing import connection, forkserver, popen_forkserver, reduction, resource_tracker, spawn, util
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerProcess, set_spawning_popen
from multiprocessing.process import BaseProcess
from typing import Any

from harness.contracts.model import Preload
from harness.runner import child

_SPAWN = multiprocessing.get_context("spawn")
_STOP_TIMEOUT_S = 10.0


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


def fork_hazard(preload: Preload, device_queries: Sequence[str] = ()) -> str | None:
    """What in this process a fork would copy wrongly, or None."""
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
    if not preload.platform_resolved and platforms is not None and getattr(platforms, "_current_platform", None):
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
        process = _SPAWN.Process(
            target=warm_main,
            args=(listener, alive, self.preload, self.environment, os.getpid()),
            name="dflash-warm-parent",
            daemon=True,
        )
        try:
            process.start()
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


class SharedWarmParent:
    """One warm parent that successive runners of this process fork their cells from, instead
    of each importing the preload again: ``run_matrix`` (every planted-fault test starts one)
    takes it from here. A runner never closes it; it stops when this process exits, or when a
    runner asks for another preload or environment.

    The key holds this process's whole environment, not only the runner's: the warm parent
    imported the preload under the variables set when it started, and a cell process inherits
    them, so a test that sets one (a plant's log file) gets a warm parent started under it.
    At most one is kept: a changed key stops the old one first, so no idle warm parent (a
    vLLM import's worth of memory) outlives its use."""

    # pytest names the running test here, a new value for every test; no cell reads it.
    VOLATILE = frozenset({"PYTEST_CURRENT_TEST"})

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._warm: WarmParent | None = None
        atexit.register(self.close)

    def get(self, preload: Preload, environment: dict[str, str]) -> WarmParent:
        inherited = tuple(sorted(item for item in os.environ.items() if item[0] not in self.VOLATILE))
        key = (preload, tuple(sorted(environment.items())), inherited)
        if self._warm is None or key != self._key:
            self.close()
            self._key, self._warm = key, WarmParent(preload, environment)
        return self._warm

    def close(self) -> None:
        warm, self._warm, self._key = self._warm, None, None
        if warm is not None:
            warm.close()


SHARED = SharedWarmParent()
