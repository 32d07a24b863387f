"""The gpu lanes' pytest plugin: their contracts name it, so ``dflash-matrix run`` loads it (``-p``)
for ``tox -e gpu``, ``tox -e gpu-emulated``, the workflows and a user's own run alike.

Three jobs, all before any process touches CUDA:

- refuse, in one line, a run where no CUDA device is visible, or where the visible devices
  span several GPU generations (one run = one generation's expectations);
- give each pytest-xdist worker one GPU: the controller counts the devices and hands worker
  ``gwN`` its ``CUDA_VISIBLE_DEVICES`` value; the worker sets it at configure time, before
  ``harness.runner.supervisor`` spawns the cell processes that inherit it. ``-n <num GPUs>`` shards the
  matrix across the GPUs;
- run the cells of this GPU generation only: the matrix lists every generation on its
  ``capability`` axis so that one expectations file keys rules on it; cells of the other
  generations belong to other runners and are deselected (pytest reports how many). A
  generation the matrix does not list is refused, never run against no expectations.

The gpu_emulated lane runs the same way on an emulated runner: ``--emulated-gpus 2x9.0`` stands
in for the driver's answer (two GPUs of compute capability 9.0), for that lane only. A gpu run
given it is refused, so no real run ever counts a device that is not there.

Its report header also says what FlashInfer will compile on first use (``harness.cuda.flashinfer_jit``).
The device facts (name, capability, driver and CUDA versions) reach the JUnit testsuite
properties and the run entry in matrix.json's ``runs`` through the lane's ``environment()``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from harness.bundled import matrix_path
from harness.contracts.lanes import GPU_EMULATED
from harness.cuda import flashinfer_jit
from harness.cuda.devices import (
    EMULATED_GENERATION,
    EXIT_NO_DEVICE,
    VISIBLE_DEVICES,
    DeviceRefusal,
    Inventory,
    device_for_worker,
    device_selectors,
    emulated_inventory,
    query_environment,
    single_generation,
)
from harness.errors import EXIT_BAD_INPUT, InputError
from harness.matrix import Matrix, expand, load_matrix

WORKER_DEVICE = "dflash_cuda_visible_devices"
WORKER_CAPABILITY = "dflash_cuda_capability"
EMULATED_GPUS = "--emulated-gpus"

_INVENTORY = pytest.StashKey[Inventory]()
_CAPABILITY = pytest.StashKey[str]()
_SPLIT = pytest.StashKey[tuple[int, int]]()  # (cells of this generation, cells of others)
_PINNED = pytest.StashKey[dict[str, str]]()  # worker id -> its CUDA_VISIBLE_DEVICES


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("dflash-matrix").addoption(
        EMULATED_GPUS,
        metavar="NxCAPABILITY",
        help=f"{GPU_EMULATED.name} lane only: the emulated runner's GPUs, e.g. 2x9.0 (two of compute capability 9.0)",
    )


def _matrix(config: pytest.Config) -> Matrix | None:
    path = config.getoption("matrix", None)
    if not path:
        return None
    try:
        return load_matrix(matrix_path(path))
    except InputError:
        return None  # the matrix plugin reports a bad file in its own words


def _inventory(config: pytest.Config, matrix: Matrix | None) -> Inventory:
    """The driver's devices; for the gpu_emulated lane only, the emulated runner's."""
    emulated = config.getoption("emulated_gpus", None)
    if matrix is None or matrix.lane != GPU_EMULATED.name:
        if emulated is not None:
            lane = "this run" if matrix is None else f"the {matrix.lane} lane"
            raise InputError(
                EMULATED_GPUS,
                "",
                f"only the {GPU_EMULATED.name} lane runs on emulated GPUs; "
                f"{lane} counts the devices the NVIDIA driver reports",
            )
        return query_environment()
    examples = [f"1x{capability}" for capability in dict(matrix.axes).get("capability", ())]
    if emulated is None:
        raise InputError(
            EMULATED_GPUS,
            "",
            f"the {matrix.lane} lane runs one GPU generation per run, as a GPU runner does: "
            "say which, and how many GPUs",
            examples,
        )
    try:
        return emulated_inventory(emulated)
    except ValueError as error:
        raise InputError(EMULATED_GPUS, "", str(error), examples) from None


def _check_matrix_lists(config: pytest.Config, matrix: Matrix, inventory: Inventory, capability: str) -> None:
    cells = expand(matrix)
    config.stash[_SPLIT] = (
        sum(1 for cell in cells if cell.get("capability") in (None, capability)),
        sum(1 for cell in cells if cell.get("capability") not in (None, capability)),
    )
    listed = dict(matrix.axes).get("capability")
    if listed is not None and capability not in listed:
        names = ", ".join(sorted({device.name for device in inventory.devices}))
        error = InputError(
            matrix.path,
            "axes.capability",
            f"the visible GPUs ({names}) are compute capability {capability}, which this matrix does not list; "
            "add it, and its expectations, to run here",
            [str(value) for value in listed],
        )
        pytest.exit(error.line(), returncode=EXIT_BAD_INPUT)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        # An xdist worker: the controller already checked the devices and chose ours.
        os.environ[VISIBLE_DEVICES] = workerinput[WORKER_DEVICE]
        config.stash[_CAPABILITY] = workerinput[WORKER_CAPABILITY]
        return
    matrix = _matrix(config)
    try:
        inventory = _inventory(config, matrix)
        capability = single_generation(inventory)
    except DeviceRefusal as refusal:
        pytest.exit(refusal.line(), returncode=EXIT_NO_DEVICE)
    except InputError as error:
        pytest.exit(error.line(), returncode=EXIT_BAD_INPUT)
    if matrix is not None:
        _check_matrix_lists(config, matrix, inventory, capability)
    if config.getoption("emulated_gpus", None) is not None:
        # The workers and the cell processes inherit it: the emulated host reports this
        # generation as its run's device, so each generation's shard is a run of its own.
        os.environ[EMULATED_GENERATION] = capability
    config.stash[_INVENTORY] = inventory
    config.stash[_CAPABILITY] = capability
    config.stash[_PINNED] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller, once per worker before it starts."""
    inventory = node.config.stash[_INVENTORY]
    device = device_for_worker(node.gateway.id, device_selectors(inventory))
    node.workerinput[WORKER_DEVICE] = device
    node.workerinput[WORKER_CAPABILITY] = node.config.stash[_CAPABILITY]
    node.config.stash[_PINNED][node.gateway.id] = device


def split_generations(items: list[pytest.Item], capability: str) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """(items to run here, cells of other GPU generations): items that are no cell, or whose
    cell names no capability, run on every runner."""
    keep: list[pytest.Item] = []
    other_generations: list[pytest.Item] = []
    for item in items:
        cell = getattr(item, "cell", None)
        wanted = cell.get("capability") if cell is not None else None
        (other_generations if wanted is not None and wanted != capability else keep).append(item)
    return keep, other_generations


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    capability = config.stash.get(_CAPABILITY, None)
    if capability is None:
        return
    keep, other_generations = split_generations(items, capability)
    if other_generations:
        config.hook.pytest_deselected(items=other_generations)
        items[:] = keep


def pytest_report_header(config: pytest.Config) -> list[str]:
    inventory = config.stash.get(_INVENTORY, None)
    return [f"dflash-matrix gpu: {inventory.describe()}"] if inventory is not None else []


def pytest_sessionstart(session: pytest.Session) -> None:
    """Said once, before the first cell and whatever the verbosity: a FlashInfer cell might
    otherwise spend its timeout compiling, with nobody told why."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    emulated = session.config.getoption("emulated_gpus", None) is not None
    if reporter is not None and session.config.stash.get(_INVENTORY, None) is not None and not emulated:
        reporter.write_line(f"dflash-matrix gpu: {flashinfer_jit.status()}")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Said by the process that talks to the user: under xdist the workers deselect, and
    pytest's own "deselected" count never reaches the controller's summary."""
    inventory = config.stash.get(_INVENTORY, None)
    split = config.stash.get(_SPLIT, None)
    if inventory is None or split is None:
        return
    here, elsewhere = split
    names = ", ".join(sorted({device.name for device in inventory.devices}))
    terminalreporter.write_line(
        f"dflash-matrix gpu: {len(inventory.devices)} x {names} (compute capability {config.stash[_CAPABILITY]}): "
        f"{here} cells for this generation, {elsewhere} cells of other generations left to their runners"
    )
    pinned = config.stash.get(_PINNED, {})
    if pinned:
        workers = ", ".join(f"{worker}={device}" for worker, device in sorted(pinned.items()))
        terminalreporter.write_line(f"dflash-matrix gpu: {VISIBLE_DEVICES} per worker: {workers}")
