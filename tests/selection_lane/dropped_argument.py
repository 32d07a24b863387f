"""A planted fault in the one translation of a cell into vLLM's arguments
(``harness.deployment.arguments``): the speculative config loses the draft's ``attention_backend``.
The lanes build their engines from it and ``repro`` writes it into its scripts, so both must see it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from harness.deployment import arguments
from harness.lanes.selection import SelectionLane

DROPPED = "attention_backend"


def dropping(original: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    def planted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        speculative = original(*args, **kwargs)
        speculative.pop(DROPPED, None)
        return speculative

    return planted


def drop() -> None:
    """Plant it in this process (``engine_arguments`` reads ``speculative_config`` at each call)."""
    arguments.speculative_config = dropping(arguments.speculative_config)


def plant(lane: SelectionLane) -> None:
    """Runner plant (``tests.selection_lane.dropped_argument:plant``), in the cell process."""
    drop()
