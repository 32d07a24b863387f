"""What a lane saw when it tried one cell. Lanes produce these; they never decide verdicts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.stages import Stage

# How an ``unavailable`` message starts where the lane's host cannot answer what vLLM asks (a
# real CUDA device, say): a limit of the host, not vLLM's behaviour. Reports count such cells
# apart (summary host_limited) and JUnit shows them skipped, neither green nor red.
HOST_LIMIT = "host limit: "


@dataclass(frozen=True)
class Claim:
    """What the requested backend says about itself (``validate_configuration`` and friends)."""

    supported: bool
    reasons: tuple[str, ...] = ()


def json_safe(value: Any) -> Any:
    """The value with every non-finite float as its text ("nan", "inf"), in lists and tables too:
    JSON has no NaN or infinity and strict readers refuse them, yet a NaN error is exactly what a
    mismatch report must keep. ``CellResult.from_json`` reads the text back as the number."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value


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
class LayerAgreement:
    """One draft layer of the V2-loaded draft against the same layer of the V1-loaded draft,
    both fed the same inputs through the same forward: ``impl`` names each side's backend impl."""

    layer: str
    v2_impl: str
    v1_impl: str
    bitwise: bool
    max_abs_diff: float

    @property
    def same_kernel(self) -> bool:
        return self.v2_impl == self.v1_impl

    def disagreement(self, tolerance: float | None) -> str | None:
        """Why the two loaders' layers disagree: the same kernel on the same inputs must give the
        same bits; different kernels must agree within the cell's tolerance (NaN never does)."""
        if self.same_kernel:
            if self.bitwise:
                return None
            return f"{self.layer} ({self.v2_impl} both) not bitwise equal, max diff {self.max_abs_diff:.3g}"
        if tolerance is not None and self.max_abs_diff <= tolerance:
            return None
        return (
            f"{self.layer} ({self.v2_impl} vs {self.v1_impl}) max diff {self.max_abs_diff:.3g} "
            f"> tolerance {tolerance if tolerance is None else format(tolerance, '.3g')}"
        )


@dataclass(frozen=True)
class LoaderDifferential:
    """The loader differential of a loader-v2 cell (vLLM #49559: a draft that works on Model
    Runner V1 and not on V2): the draft built again from the same checkpoint by Model Runner
    V1's loader, its layers fed the same inputs. ``not_comparable``: why there is no V1 draft
    to compare with (V1's own refusal, or no V1 loader in this release)."""

    layers: tuple[LayerAgreement, ...] = ()
    not_comparable: str | None = None

    def disagreements(self, tolerance: float | None) -> tuple[str, ...]:
        return tuple(why for layer in self.layers if (why := layer.disagreement(tolerance)) is not None)

    def to_json(self) -> dict[str, Any]:
        if self.not_comparable is not None:
            return {"comparable": False, "reason": self.not_comparable}
        return {
            "comparable": True,
            "layers": [
                {
                    "layer": layer.layer,
                    "v2_impl": layer.v2_impl,
                    "v1_impl": layer.v1_impl,
                    "bitwise": layer.bitwise,
                    "max_abs_diff": json_safe(layer.max_abs_diff),
                }
                for layer in self.layers
            ],
        }


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
    rejection_stage:   where it was refused: the selector (None, the default) or the engine's start-up.
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
    lost_settings:     the settings draft layers carry other than the draft asked for, each naming
                       the layer, the setting and both values (``harness.attention.audit``): a
                       window, a KV-cache dtype, a prefix-LM flag the target passed on (wrong-setting).
    loader_differential: a loader-v2 cell's layer outputs against Model Runner V1's draft of the
                       same checkpoint; None where no differential was run (not a v2 cell, or the
                       cell never reached the forward).
    """

    requested_backend: str | None
    platform_choice: str | None = None
    observed_backends: tuple[str, ...] = ()
    rejection: tuple[str, ...] | None = None
    rejection_stage: Stage | None = None
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
    loader_differential: LoaderDifferential | None = None
    details: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
