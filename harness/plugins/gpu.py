"""The gpu lane's pytest plugin, loaded by ``tox -e gpu`` (``pytest -p harness.plugins.gpu``).

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

Its report header also says what FlashInfer will compile on first use (``harness.cuda.flashinfer_jit``).
The device facts (name, capability, driver and CUDA versions) reach the JUnit testsuite
properties and the run entry in matrix.json's ``runs`` through the lane's ``environment()``.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from harness.cuda import flashinfer_jit
from harness.cuda.devices import (
    EXIT_NO_DEVICE,
    VISIBLE_DEVICES,
    DeviceRefusal,
    Inventory,
    device_for_worker,
    device_selectors,
    query_environment,
    single_generation,
)
from harness.errors import EXIT_BAD_INPUT, InputError
from harness.matrix import expand, load_matrix

WORKER_DEVICE = "dflash_cuda_visible_devices"
WORKER_CAPABILITY = "dflash_cuda_capability"

_INVENTORY = pytest.StashKey[Inventory]()
_CAPABILITY = pytest.StashKey[str]()
_SPLIT = pytest.StashKey[tuple[int, int]]()  # (cells of this generation, cells of others)


def _check_matrix_lists(config: pytest.Config, inventory: Inventory, capability: str) -> None:
    path = config.getoption("matrix", None)
    if not path:
        return
    try:
        matrix = load_matrix(path)
    except InputError:
        return  # the matrix plugin reports a bad file in its own words
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
    try:
        inventory = query_environment()
        capability = single_generation(inventory)
    except DeviceRefusal as refusal:
        pytest.exit(refusal.line(), returncode=EXIT_NO_DEVICE)
    _check_matrix_lists(config, inventory, capability)
    config.stash[_INVENTORY] = inventory
    config.stash[_CAPABILITY] = capability


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist controller, once per worker before it starts."""
    inventory = node.config.stash[_INVENTORY]
    node.workerinput[WORKER_DEVICE] = device_for_worker(node.gateway.id, device_selectors(inventory))
    node.workerinput[WORKER_CAPABILITY] = node.config.stash[_CAPABILITY]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    capability = config.stash.get(_CAPABILITY, None)
    if capability is None:
        return
    keep: list[pytest.Item] = []
    other_generations: list[pytest.Item] = []
    for item in items:
        cell = getattr(item, "cell", None)
        wanted = cell.get("capability") if cell is not None else None
        (other_generations if wanted is not None and wanted != capability else keep).append(item)
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
    if reporter is not None and session.config.stash.get(_INVENTORY, None) is not None:
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
