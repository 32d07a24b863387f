"""Timers around the work a cpu cell cannot avoid, for benchmark runs only.

``install`` is passed to the runner like a planted fault (``--plant
benchmarks.stage_timers:install``): it is called once in the cell process, wraps vLLM's
model construction steps, and adds the seconds each took during a cell to that cell's
details (``bench_timers_s``). The lane's own laps (``timings_s``: ``forward_<i>``,
``compare_<i>``) give the forward passes and the comparison. Every wrapper calls the
original and only reads the clock, so nothing a cell verifies changes.

Keys: ``model_init`` (the model's constructor, vLLM's ``create_model``), ``weight_load``
(reading the checkpoint and converting weights to the kernels' layout), ``load_model``
(the whole build: the two above plus what vLLM does around them, e.g. ``gc.collect()``).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any

DETAILS_KEY = "bench_timers_s"

_spent: dict[str, float] = {}


def _timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _spent[name] = _spent.get(name, 0.0) + time.perf_counter() - started

    return timed


def time_model_builds() -> None:
    """Wrap vLLM's model loader in this process; call it once per process."""
    from vllm.model_executor.model_loader import base_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    loader = base_loader.BaseModelLoader
    loader.create_model = _timed("model_init", loader.create_model)
    DefaultModelLoader.load_weights = _timed("weight_load", DefaultModelLoader.load_weights)
    # base_loader calls it by its module-level name.
    base_loader.process_weights_after_loading = _timed("weight_load", base_loader.process_weights_after_loading)
    loader.load_model = _timed("load_model", loader.load_model)


def take() -> dict[str, float]:
    """The seconds spent since the last ``take``, by key; starts the next interval."""
    spent = {name: round(seconds, 6) for name, seconds in _spent.items()}
    _spent.clear()
    return spent


def install(lane: Any) -> None:
    """The plant: time model builds and attach each cell's timers to its observation."""
    time_model_builds()
    observe = lane.observe

    @functools.wraps(observe)
    def observe_timed(cell: Any, stage_log: Any) -> Any:
        take()
        observation = observe(cell, stage_log)
        return dataclasses.replace(observation, details={**observation.details, DETAILS_KEY: take()})

    lane.observe = observe_timed


def irreducible_s(timers: dict[str, float], laps: dict[str, float]) -> float:
    """Model init + weight load + every layer's forward pass and comparison."""
    forward = sum(seconds for lap, seconds in laps.items() if lap.startswith(("forward_", "compare_")))
    return timers.get("model_init", 0.0) + timers.get("weight_load", 0.0) + forward
