"""A verdict depends on the cell and the release only: the cell order a run takes, the caches a cell
process clears before each cell, the machine a lane declares, the host rules of the cpu lane."""

from __future__ import annotations

import functools
import sys
from types import ModuleType

import pytest

from harness.cell_process import ProcessCaches
from harness.cli import main
from harness.contracts.lanes import CONTRACTS, SELECTION
from harness.contracts.machine import CpuIsa, cpu_isa_from_flags
from harness.errors import InputError
from harness.matrix import expand, load_matrix
from harness.order import CellOrder, parse_order

pytestmark = pytest.mark.pure

ITEMS = [("b", 1), ("a", 2), ("b", 3), ("a", 4), ("c", 5), ("b", 6)]


def key(item: tuple[str, int]) -> str:
    return item[0]


def test_the_default_order_groups_cells_by_process_key_as_the_matrix_expands_them() -> None:
    assert parse_order(None).arrange(ITEMS, key) == (("a", 2), ("a", 4), ("b", 1), ("b", 3), ("b", 6), ("c", 5))
    assert parse_order("default") == CellOrder()


def test_reverse_is_the_default_order_backwards() -> None:
    assert parse_order("reverse").arrange(ITEMS, key) == tuple(reversed(CellOrder().arrange(ITEMS, key)))


def test_a_shuffle_is_a_permutation_that_keeps_each_process_key_together_and_depends_on_its_seed_only() -> None:
    items = [(f"k{n % 5}", n) for n in range(60)]
    first = parse_order("shuffle:7").arrange(items, key)
    assert sorted(first) == sorted(items)
    keys = [k for k, _ in first]
    assert keys == sorted(keys, key=keys.index)  # each key's cells are contiguous
    assert first == parse_order("shuffle:7").arrange(items, key)
    assert first != parse_order("shuffle:8").arrange(items, key)
    assert first != CellOrder().arrange(items, key)
    assert str(parse_order("shuffle:7")) == "shuffle:7"


@pytest.mark.parametrize("text", ["random", "shuffle", "shuffle:", "shuffle:x", "reversed", ""])
def test_a_bad_order_is_one_input_error_naming_the_choices(text: str) -> None:
    with pytest.raises(InputError) as error:
        parse_order(text)
    assert "reverse" in error.value.line() and "shuffle:SEED" in error.value.line()


def test_run_refuses_a_bad_order_in_one_line_before_anything_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "selection", "--order", "sideways"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "'sideways' is not a cell order" in err[0]


def _package(name: str) -> tuple[ModuleType, ModuleType]:
    """A throwaway package with caches at module level, in a class, behind a classmethod, and an
    attribute that raises on any getattr (as ctypes' cdll does)."""

    class Raising:
        def __getattr__(self, name: str) -> object:
            raise OSError(f"{name}: cannot open shared object file")

    package, module = ModuleType(name), ModuleType(f"{name}.selector")
    calls: list[str] = []

    @functools.cache
    def selected(backend: str) -> str:
        calls.append(backend)
        return backend

    class Platform:
        @classmethod
        @functools.lru_cache(maxsize=4)
        def priorities(cls, capability: int) -> int:
            calls.append(f"priorities {capability}")
            return capability

    Platform.__module__ = module.__name__
    module.selected, module.Platform, module.cdll, module.calls = selected, Platform, Raising(), calls  # type: ignore[attr-defined]
    return package, module


def test_process_caches_clear_every_functools_cache_of_the_packages_named_and_no_other() -> None:
    package, module = _package("dflash_isolation_probe")
    other_package, other = _package("dflash_isolation_other")
    sys.modules.update({m.__name__: m for m in (package, module, other_package, other)})
    try:
        for m in (module, other):
            m.selected("FLASH_ATTN")
            m.Platform.priorities(90)
        assert ProcessCaches(("dflash_isolation_probe",)).clear() == 2
        for m in (module, other):
            m.selected("FLASH_ATTN")
            m.Platform.priorities(90)
        # Cleared: asked again. Not named: still answered from the cache.
        assert module.calls == ["FLASH_ATTN", "priorities 90"] * 2
        assert other.calls == ["FLASH_ATTN", "priorities 90"]
    finally:
        for m in (package, module, other_package, other):
            sys.modules.pop(m.__name__, None)


def test_the_vllm_lanes_declare_a_reset_the_cell_process_can_resolve() -> None:
    from harness.runner.child import resolve

    for name in ("cpu", "selection", "gpu_emulated"):
        isolation = CONTRACTS[name].isolation
        assert isolation.reset is not None and isolation.why
        assert callable(resolve(isolation.reset))


def test_the_selection_lane_declares_every_generation_its_matrix_simulates() -> None:
    machine = SELECTION.machine
    assert machine is not None
    capabilities = {str(cell.get("capability")) for cell in expand(load_matrix("matrices/selection.toml"))}
    assert capabilities <= set(machine.gpus)
    assert machine.cpu.avx512 and machine.cpu.isa == "avx512"
    assert all(gpu.sm_count > 0 and gpu.memory_bytes > 0 for gpu in machine.gpus.values())


@pytest.mark.parametrize(
    ("flags", "isa"),
    [
        ({"avx2": True, "avx512": True, "amx_tile": True}, "amx"),
        ({"avx2": True, "avx512": True}, "avx512"),
        ({"avx2": True}, "avx2"),
        ({}, "none"),
    ],
)
def test_a_host_isa_is_the_one_word_cpu_attn_turns_on(flags: dict[str, bool], isa: str) -> None:
    assert cpu_isa_from_flags(flags).isa == isa
    assert isinstance(cpu_isa_from_flags(flags), CpuIsa)
