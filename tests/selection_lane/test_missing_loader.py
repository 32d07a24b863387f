"""A cell whose loader the installed vLLM lacks (Model Runner V1's proposers are gone in 0.34.0)
is `unavailable` before the platform is asked, as in the cpu and gpu lanes: a refusal or a crash
of the platform's own checks must not stand in for a loader that does not exist. The vLLM API
layer is replaced by a stub here (our logic only); the real 0.34.0 run is in the README."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from harness.contracts.lanes import SELECTION
from harness.matrix import expand, load_matrix
from harness.stages import Stage
from harness.verdict import Verdict, judge

pytestmark = pytest.mark.vllm

LACKS_V1 = "this vLLM release lacks vllm.v1.spec_decode.dflash.DFlashProposer (ModuleNotFoundError)"


class ReleaseWithoutV1:
    def missing_for_selection(self) -> None:
        return None

    def missing_for_loader(self, loader: str) -> str | None:
        return LACKS_V1 if loader == "v1" else None

    def missing_cache_dtype(self, *dtypes: str | None) -> None:
        return None


def _state() -> Any:
    from harness.lanes.selection.process_state import ProcessState  # imports torch, not vLLM

    state: Any = object.__new__(ProcessState)
    state.gpu = SimpleNamespace(flashinfer_cubin=True)
    state.installed = SimpleNamespace(gpu=SimpleNamespace(device_name="Simulated SM90"), libcuda="stub")
    state.options = SimpleNamespace(target_backend=None)
    state.not_in_matrix = ()
    state.apis = ReleaseWithoutV1()

    def platform_asked(cell: Any) -> Any:
        # A platform check that crashes (not a host limit: "Found no NVIDIA driver" would be one).
        raise RuntimeError("the platform's own check failed")

    state.select = platform_asked
    return state


def test_a_loader_the_release_lacks_is_unavailable_before_the_platform_is_asked() -> None:
    cells = {cell.id: cell for cell in expand(load_matrix("matrices/selection.toml"))}
    state, stages = _state(), list[Stage]()
    for loader in ("v1", "v2"):
        cell = cells[f"sm90-FLASH_ATTN-causal-sink-{loader}-cubin"]
        assert SELECTION.value(cell.values, "loader") == loader
        judgement = judge(state.observe(cell, stages.append))
        if loader == "v1":
            assert judgement.verdict == Verdict.UNAVAILABLE and LACKS_V1 in judgement.message
            assert stages == []  # the platform was never asked
        else:  # the v2 twin still meets the platform, whose crash is its verdict
            assert judgement.verdict == Verdict.CRASH and stages == [Stage.SELECT]
