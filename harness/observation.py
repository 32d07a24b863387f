"""What a lane saw when it tried one cell. Lanes produce these; they never decide verdicts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.stages import Stage


@dataclass(frozen=True)
class Claim:
    """What the requested backend says about itself (``validate_configuration`` and friends)."""

    supported: bool
    reasons: tuple[str, ...] = ()


def one_line(text: object, limit: int = 2000) -> str:
    """Messages land in table cells and JUnit attributes: one line, bounded."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


@dataclass(frozen=True)
class Failure:
    """An exception nobody expected, and where it happened."""

    stage: Stage
    error_type: str
    message: str

    @classmethod
    def of(cls, stage: Stage, error: BaseException, limit: int = 2000) -> Failure:
        return cls(stage, type(error).__name__, one_line(error, limit))


@dataclass(frozen=True)
class Observation:
    """Facts only. ``harness.verdict.judge`` turns them into a verdict.

    requested_backend: the backend asked for, None for auto-selection.
    platform_choice:   the backend the platform's own selector returns for that request in
                       isolation; a draft layer carrying something else means the request was
                       lost on its way through the loader (wrong-backend), while a layer carrying
                       exactly this one means the platform substituted it.
    observed_backends: the backend each draft attention layer really carries, read from the layer.
    rejection:         reasons, when the request was cleanly refused (a ValueError with reasons).
    platform_refusal:  reasons the platform's selector gives for refusing the request in isolation,
                       recorded when the draft was built all the same: then no selector ever saw
                       the request, and the layers carry whatever the loader asked for instead.
    unavailable:       why the backend, or the API the lane needs, does not exist here.
    failure:           an unexpected exception, with its stage.
    timed_out:         the cell ran past its time limit (set by the runner, never by a lane).
    retire_process:    why the process that observed this cannot be trusted with another cell
                       (a sticky CUDA error): the runner replaces it before the next cell.
    max_abs_err / tolerance: the numeric comparison against the reference, when one ran.
    layer_choices:     the platform's choice per draft layer, when the layers of one draft differ
                       (a hybrid draft's windowed and full layers); empty = ``platform_choice``
                       holds for every layer.
    lost_settings:     draft-layer settings the draft asked for but the layers do not carry
                       (e.g. speculative_config.kv_cache_dtype): lost in the loader, like a backend.
    """

    requested_backend: str | None
    platform_choice: str | None = None
    observed_backends: tuple[str, ...] = ()
    rejection: tuple[str, ...] | None = None
    platform_refusal: tuple[str, ...] | None = None
    unavailable: str | None = None
    failure: Failure | None = None
    timed_out: bool = False
    retire_process: str | None = None
    max_abs_err: float | None = None
    tolerance: float | None = None
    claim: Claim | None = None
    layer_choices: tuple[str, ...] = ()
    lost_settings: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
