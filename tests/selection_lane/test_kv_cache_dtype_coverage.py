"""Every KV-cache dtype the installed vLLM's CacheDType accepts is a value of the kv_cache_dtype
axis and a target's KV dtype in the selection matrix, and the axis names no value the release
lacks without making its cells unavailable: a dtype a new release adds is a failing test here,
never a deployment nobody tried."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from harness.axes import DRAFT_KV_CACHE_DTYPES, KV_CACHE_DTYPES
from harness.matrix import expand, load_matrix

pytestmark = pytest.mark.vllm

MATRIX = Path(__file__).resolve().parents[2] / "matrices" / "selection.toml"


def _installed() -> tuple[str, ...]:
    from vllm.config.cache import CacheDType

    return tuple(str(value) for value in typing.get_args(CacheDType))


def test_the_axis_lists_every_kv_cache_dtype_the_installed_release_accepts() -> None:
    installed = _installed()
    assert not set(installed) - set(KV_CACHE_DTYPES), (
        f"vLLM's CacheDType lists {sorted(set(installed) - set(KV_CACHE_DTYPES))}, harness/axes.py's "
        "KV_CACHE_DTYPES does not: add them there and to the selection matrix's kv_cache_dtype block"
    )
    # The draft's own dtype takes every value too ("target" = unset).
    assert set(installed) <= set(DRAFT_KV_CACHE_DTYPES)


def test_every_kv_cache_dtype_of_the_release_is_a_target_kv_dtype_of_some_selection_cell() -> None:
    used = {str(cell.values.get("kv_cache_dtype", "auto")) for cell in expand(load_matrix(MATRIX))}
    assert set(_installed()) <= used, sorted(set(_installed()) - used)
    # A value the matrix names that this release lacks is a cell decided unavailable by the lane
    # (apis.unaccepted_cache_dtype): it must be one of the axis's, not a typo.
    assert used <= set(KV_CACHE_DTYPES), sorted(used - set(KV_CACHE_DTYPES))
