"""The Model Runner V2 DFlash loader as it was before vLLM PR #46770, planted into a cell process
(the rebuilt loader itself is ``pre_fix.install_pre_fix_loader``)."""

from __future__ import annotations

from harness.lanes.selection import SelectionLane

from .pre_fix import install_pre_fix_loader


def plant(lane: SelectionLane) -> None:
    """Runner plant (``tests.selection_lane.prefix_loader:plant``): patch vLLM only once the
    lane has installed the simulated platform, since importing vLLM earlier would resolve it."""
    lane.after_install(install_pre_fix_loader)
