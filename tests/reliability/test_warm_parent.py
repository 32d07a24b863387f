"""Cell processes forked by a warm parent (harness.runner.warm): forked there, not by the
runner; a replaced process comes from the same warm parent; the whole chain dies with a
runner killed outright; a preload that fails or leaves a fork hazard fails every cell with
the reason; a lane with a per-key start gets a warm parent per process key, kept across planted
runs; DFLASH_MATRIX_START=spawn still spawns."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import pytest

from harness.contracts.model import Preload
from harness.matrix import expand, load_matrix
from harness.runner import supervisor, warm
from harness.runner.session import run_matrix
from harness.runner.supervisor import CellRunner
from harness.runner.warm import DeviceQueries, SharedWarmParent, WarmParent, fork_hazard

from .planted import inner_env, matrix_pytest_argv, write_fake_matrix

pytestmark = pytest.mark.process


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _children_of(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if _parent_of(int(entry.name)) == parent:
                    found.append(int(entry.name))
            except (OSError, ValueError):
                continue
    return found


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_cells_are_forked_by_one_warm_parent_and_a_replacement_comes_from_it_too(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "warm", ["A_ATTN"], {"A_ATTN-causal-nosink": "segfault"})
    matrix = load_matrix(path)
    cells = expand(matrix)
    runner = CellRunner(matrix)
    try:
        first = runner.run(cells[0])
        warm_parent = _parent_of(first.details["pid"])
        crashed = runner.run(cells[1])
        replaced = runner.run(cells[2])
        assert _parent_of(replaced.details["pid"]) == warm_parent
    finally:
        runner.close()
    assert warm_parent != os.getpid(), "a cell process is the warm parent's child, not the runner's"
    assert crashed.failure is not None and crashed.failure.error_type == "ProcessDied"
    assert crashed.failure.message.startswith("cell process killed by SIGSEGV")
    assert replaced.failure is None and replaced.details["pid"] != first.details["pid"]
    assert not Path(f"/proc/{warm_parent}").exists() or _parent_of(warm_parent) != os.getpid(), (
        "close() stops the warm parent"
    )


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_successive_planted_runs_fork_from_one_shared_warm_parent_until_the_environment_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = SharedWarmParent()
    monkeypatch.setattr(warm, "SHARED", shared)
    path = write_fake_matrix(tmp_path, "shared", ["A_ATTN"])
    try:
        first = run_matrix(path, cell_ids=["A_ATTN-causal-sink"])
        second = run_matrix(path, cell_ids=["A_ATTN-noncausal-sink"])
        parent = first[0].details["ppid"]
        assert parent != os.getpid() and second[0].details["ppid"] == parent, "one import, not one a run"
        assert first[0].details["pid"] != second[0].details["pid"], "each run still gets its own cell process"
        # A variable the next run sets (a plant's log file) must reach its cells: a new warm
        # parent imports under it, and the old one is stopped, not left idle.
        monkeypatch.setenv("DFLASH_TEST_PLANT_LOG", str(tmp_path / "plant.log"))
        third = run_matrix(path, cell_ids=["A_ATTN-causal-nosink"])
        assert third[0].details["ppid"] not in (parent, os.getpid())
        assert not Path(f"/proc/{parent}").exists() or _parent_of(parent) != os.getpid(), "the old one is stopped"
    finally:
        shared.close()
    assert all(r.ok for r in (*first, *second, *third)), [(r.id, r.message) for r in (*first, *second, *third)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_each_process_key_forks_its_cells_from_a_warm_parent_that_started_it(tmp_path: Path) -> None:
    """The fake lane's per-key start (Preload.per_key) records where it ran and for which
    capability: each key's cells come from a warm parent of their own, forked by the lane's."""
    matrix = load_matrix(write_fake_matrix(tmp_path, "keys", ["A_ATTN"], capabilities=["8.0", "9.0"]))
    cells = {cell.id: cell for cell in expand(matrix)}
    runner = CellRunner(matrix)
    lane_warm = []  # the parent of each key's warm parent, read while that one runs
    try:
        results = []
        for cell_id in ("sm80-A_ATTN-causal-sink", "sm80-A_ATTN-noncausal-sink", "sm90-A_ATTN-causal-sink"):
            results.append(runner.run(cells[cell_id]))
            lane_warm.append(_parent_of(int(results[-1].details["ppid"])))
        results.append(runner.run(cells["sm80-A_ATTN-causal-nosink"]))
    finally:
        runner.close()
    first, again, other, back = results
    assert all(r.failure is None for r in results), [r.failure for r in results]
    for result, capability in zip(results, ("8.0", "8.0", "9.0", "8.0"), strict=True):
        assert result.details["prepared_for"] == capability
        assert result.details["key_parent"] == result.details["ppid"], "forked by the key's warm parent"
    assert again.details["pid"] == first.details["pid"], "one cell process serves a key's cells in a row"
    # The runner keeps one key's warm parent: SM80 met again after SM90 is started again.
    assert len({first.details["ppid"], other.details["ppid"], back.details["ppid"]}) == 3
    assert len(set(lane_warm)) == 1 and lane_warm[0] != os.getpid(), "every key's forked by the lane's warm parent"


def test_planted_runs_that_meet_a_key_again_fork_from_its_kept_warm_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = SharedWarmParent()
    monkeypatch.setattr(warm, "SHARED", shared)
    path = write_fake_matrix(tmp_path, "kept", ["A_ATTN"], capabilities=["8.0", "9.0", "10.0"])
    try:

        def parent(cell_id: str) -> int:
            (result,) = run_matrix(path, cell_ids=[cell_id])
            assert result.ok and result.details["key_parent"] == result.details["ppid"], (result.id, result.message)
            return int(result.details["ppid"])

        sm80 = parent("sm80-A_ATTN-causal-sink")
        sm90 = parent("sm90-A_ATTN-causal-sink")
        assert parent("sm80-A_ATTN-noncausal-sink") == sm80, "a key met again: its warm parent, no new start"
        assert shared.KEYS_KEPT == 2
        lane_warm = _parent_of(sm80)
        parent("sm100-A_ATTN-causal-sink")  # the least recently used key's (SM90) is stopped
        assert not Path(f"/proc/{sm90}").exists() or _parent_of(sm90) != lane_warm
        assert parent("sm90-A_ATTN-noncausal-sink") != sm90
    finally:
        shared.close()


def _startup_failures(matrix_path: Path, preload: Preload) -> list[str]:
    """Two cells run under a warm parent importing ``preload``: each a start-up failure, its message."""
    matrix = load_matrix(matrix_path)
    runner = CellRunner(matrix)
    runner._warm = WarmParent(preload, runner.environment)
    try:
        results = [runner.run(cell) for cell in expand(matrix)[:2]]
    finally:
        runner.close()
    for result in results:
        assert result.failure is not None and result.failure.error_type == "LaneStartup", result.failure
    return [result.failure.message for result in results if result.failure is not None]


def test_a_per_key_start_that_raises_fails_every_cell_of_the_key_with_the_reason(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "unstartable", ["A_ATTN"], capabilities=["9.0"])
    # json.loads({...}) raises TypeError: a start that fails in the key's warm parent.
    messages = _startup_failures(path, Preload(("harness.lanes.fake",), per_key="json:loads"))
    for message in messages:
        assert "the warm parent of this process key could not start it: TypeError" in message


@pytest.mark.parametrize("per_key", [None, "harness.lanes.fake:prepare_process"], ids=["lane", "per-key"])
def test_a_warm_parent_that_dies_before_forking_fails_the_cells_not_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, per_key: str | None
) -> None:
    (tmp_path / "dflash_planted_exits.py").write_text("import os\n\nos._exit(7)\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # the spawned warm parent gets the runner's sys.path
    path = write_fake_matrix(tmp_path, "dies", ["A_ATTN"], capabilities=["9.0"])
    for message in _startup_failures(path, Preload(("dflash_planted_exits",), per_key=per_key)):
        assert "its warm parent died before forking it" in message, message


def test_the_spawn_start_method_still_spawns_from_the_runner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(supervisor.START_VARIABLE, "spawn")
    matrix = load_matrix(write_fake_matrix(tmp_path, "cold", ["A_ATTN"]))
    runner = CellRunner(matrix)
    try:
        result = runner.run(expand(matrix)[0])
        assert _parent_of(result.details["pid"]) == os.getpid()
    finally:
        runner.close()
    monkeypatch.setenv(supervisor.START_VARIABLE, "cold")
    with pytest.raises(ValueError, match="DFLASH_MATRIX_START='cold': not one of warm, spawn"):
        CellRunner(matrix)


def test_a_preload_that_fails_fails_every_cell_with_the_reason(tmp_path: Path) -> None:
    path = write_fake_matrix(tmp_path, "unloadable", ["A_ATTN"])
    for message in _startup_failures(path, Preload(("harness.no_such_module",))):
        assert "the warm parent could not import its preload: ModuleNotFoundError" in message


def test_a_thread_left_by_the_preload_is_a_fork_hazard() -> None:
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="left-behind")
    thread.start()
    try:
        assert fork_hazard(Preload()) == "the warm parent's preload started threads a fork cannot copy: left-behind"
    finally:
        stop.set()
        thread.join()
    assert fork_hazard(Preload()) is None


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the parent-death signal is Linux's")
def test_killing_the_runner_alone_takes_the_warm_parent_and_its_hung_cell_with_it(tmp_path: Path) -> None:
    matrix = write_fake_matrix(tmp_path, "orphans", ["A_ATTN"], {"A_ATTN-causal-sink": "hang"}, timeout_s=120)
    run = subprocess.Popen(
        matrix_pytest_argv(matrix, tmp_path / "out"),
        cwd=tmp_path,
        env=inner_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    chain: list[int] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            cells = [cell for parent in _children_of(run.pid) for cell in _children_of(parent)]
            if cells:
                chain = [_parent_of(cells[0]), cells[0]]
                break
            time.sleep(0.05)
        assert chain, "the run never forked its cell process"
        time.sleep(0.5)  # into the hanging cell
    finally:
        run.kill()  # the pytest process only, as an OOM kill would
        run.wait(10)
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in chain) and time.monotonic() < deadline:
        time.sleep(0.05)
    alive = [pid for pid in chain if Path(f"/proc/{pid}").exists()]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert not alive, "the warm parent or its hung cell outlived the runner that owned them"


def test_a_dead_warm_parent_is_started_again_for_the_next_cell(tmp_path: Path) -> None:
    matrix = load_matrix(write_fake_matrix(tmp_path, "restart", ["A_ATTN"]))
    cells = expand(matrix)
    runner = CellRunner(matrix)
    try:
        first = runner.run(cells[0])
        warm_parent = _parent_of(first.details["pid"])
        os.kill(warm_parent, signal.SIGKILL)  # its idle cell process dies with it
        time.sleep(0.5)
        second = runner.run(cells[1])
        second_parent = _parent_of(second.details["pid"])
    finally:
        runner.close()
    assert second.failure is None, "the next cell is not blamed for a warm parent that died between cells"
    assert second_parent not in (warm_parent, os.getpid())


def _fake_torch(monkeypatch: pytest.MonkeyPatch) -> types.SimpleNamespace:
    """torch's device-count entry points, as modules in sys.modules (no torch here)."""
    counted = types.SimpleNamespace(calls=0)

    def get_device_count() -> int:
        counted.calls += 1
        return 0

    torch_c = types.ModuleType("torch._C")
    torch_c._cuda_getDeviceCount = get_device_count  # type: ignore[attr-defined]
    torch_cuda = types.ModuleType("torch.cuda")
    torch_cuda.is_initialized = lambda: False  # type: ignore[attr-defined]
    torch_cuda.is_available = lambda: sys.modules["torch._C"]._cuda_getDeviceCount() > 0  # type: ignore[attr-defined]
    torch = types.ModuleType("torch")
    torch._C, torch.cuda = torch_c, torch_cuda  # type: ignore[attr-defined]
    for name, module in (("torch", torch), ("torch._C", torch_c), ("torch.cuda", torch_cuda)):
        monkeypatch.setitem(sys.modules, name, module)
    counted.cuda = torch_cuda
    return counted


def test_a_device_count_asked_after_torch_is_imported_is_a_fork_hazard(monkeypatch: pytest.MonkeyPatch) -> None:
    torch = _fake_torch(monkeypatch)
    original = sys.modules["torch._C"]._cuda_getDeviceCount
    queries = DeviceQueries()
    queries.watch()
    assert fork_hazard(Preload(), queries.asked) is None  # watching alone asks nothing
    assert torch.cuda.is_available() is False  # what tvm_ffi's import does (xgrammar, seen in vLLM 0.33.0)
    queries.restore()
    assert sys.modules["torch._C"]._cuda_getDeviceCount is original and torch.calls == 1
    assert fork_hazard(Preload(), queries.asked) == (
        "the warm parent's preload asked torch for the device count, which a forked process would keep: "
        "torch._C._cuda_getDeviceCount"
    )


def test_an_optional_preload_module_that_is_not_installed_is_left_to_the_cell_processes(tmp_path: Path) -> None:
    matrix = load_matrix(write_fake_matrix(tmp_path, "optional", ["A_ATTN"]))
    runner = CellRunner(matrix)
    preload = Preload(("json", "dflash_no_such_module"), optional=frozenset({"dflash_no_such_module"}))
    runner._warm = WarmParent(preload, runner.environment)
    try:
        result = runner.run(expand(matrix)[0])
    finally:
        runner.close()
    assert result.failure is None, result.failure
