"""A judged cell: the record the journal stores and matrix.json lists (the contract).

matrix.json ``cells[]`` items carry at least: id, axes, requested_backend,
observed_backends, verdict, expected, stage, message, max_abs_err, tolerance,
claim, duration_s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from harness.expectations import Expectation
from harness.matrix import Cell
from harness.observation import Claim, Observation
from harness.verdict import STAGES, VERDICTS, ClaimGap, Outcome, Stage, Verdict, claim_gap, judge, outcome


class RecordError(ValueError):
    """A stored cell record that does not follow the contract."""


@dataclass(frozen=True)
class CellResult:
    id: str
    lane: str
    axes: dict[str, Any]
    requested_backend: str | None
    observed_backends: tuple[str, ...]
    platform_choice: str | None
    verdict: Verdict
    expected: Verdict
    expected_reason: str
    expected_message: str | None
    outcome: Outcome
    stage: Stage | None
    message: str
    max_abs_err: float | None
    tolerance: float | None
    claim: Claim | None
    claim_gap: ClaimGap | None
    duration_s: float
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.MATCH

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "lane": self.lane,
            "axes": self.axes,
            "requested_backend": self.requested_backend,
            "observed_backends": list(self.observed_backends),
            "platform_choice": self.platform_choice,
            "verdict": self.verdict.value,
            "expected": self.expected.value,
            "expected_reason": self.expected_reason,
            "expected_message": self.expected_message,
            "outcome": self.outcome.value,
            "stage": self.stage.value if self.stage else None,
            "message": self.message,
            "max_abs_err": _finite_or_text(self.max_abs_err),
            "tolerance": self.tolerance,
            "claim": {"supported": self.claim.supported, "reasons": list(self.claim.reasons)} if self.claim else None,
            "claim_gap": self.claim_gap.value if self.claim_gap else None,
            "duration_s": round(self.duration_s, 4),
            "details": self.details,
        }

    @classmethod
    def from_json(cls, data: object) -> CellResult:
        if not isinstance(data, dict):
            raise RecordError("a cell record must be a JSON object")
        try:
            verdict, expected = data["verdict"], data["expected"]
            for key, value in (("verdict", verdict), ("expected", expected)):
                if value not in VERDICTS:
                    raise RecordError(f"{key} {value!r} is not a verdict (valid: {', '.join(VERDICTS)})")
            stage = data.get("stage")
            if stage is not None and stage not in STAGES:
                raise RecordError(f"stage {stage!r} is not a stage (valid: {', '.join(STAGES)})")
            claim = data.get("claim")
            gap = data.get("claim_gap")
            return cls(
                id=_text(data["id"], "id"),
                lane=_text(data["lane"], "lane"),
                axes=dict(data["axes"]),
                requested_backend=data.get("requested_backend"),
                observed_backends=tuple(str(b) for b in data.get("observed_backends", ())),
                platform_choice=data.get("platform_choice"),
                verdict=Verdict(verdict),
                expected=Verdict(expected),
                expected_reason=str(data.get("expected_reason", "")),
                expected_message=data.get("expected_message"),
                outcome=Outcome(data.get("outcome", outcome(Verdict(verdict), Verdict(expected)).value)),
                stage=Stage(stage) if stage else None,
                message=str(data.get("message", "")),
                max_abs_err=_float_or_none(data.get("max_abs_err")),
                tolerance=_float_or_none(data.get("tolerance")),
                claim=Claim(bool(claim["supported"]), tuple(str(r) for r in claim.get("reasons", ()))) if claim else None,
                claim_gap=ClaimGap(gap) if gap else None,
                duration_s=float(data.get("duration_s", 0.0)),
                details=dict(data.get("details") or {}),
            )
        except KeyError as exc:
            raise RecordError(f"missing key {exc.args[0]!r}") from None
        except (TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, RecordError):
                raise
            raise RecordError(f"malformed field: {exc}") from None


def decide(cell: Cell, observation: Observation, expectation: Expectation) -> CellResult:
    """The one place where an observation meets its expectation."""
    judgement = judge(observation)
    how = outcome(judgement.verdict, expectation.verdict)
    if how == Outcome.MATCH and expectation.message and expectation.message not in judgement.message:
        how = Outcome.CHANGED  # right verdict, wrong reason: the cell fails for a reason nobody vetted
    return CellResult(
        id=cell.id,
        lane=cell.lane,
        axes=cell.values,
        requested_backend=observation.requested_backend,
        observed_backends=observation.observed_backends,
        platform_choice=observation.platform_choice,
        verdict=judgement.verdict,
        expected=expectation.verdict,
        expected_reason=expectation.describe(),
        expected_message=expectation.message,
        outcome=how,
        stage=judgement.stage,
        message=judgement.message,
        max_abs_err=observation.max_abs_err,
        tolerance=observation.tolerance if observation.tolerance is not None else cell.tolerance,
        claim=observation.claim,
        claim_gap=claim_gap(observation.claim, judgement.verdict),
        duration_s=observation.duration_s,
        details=dict(observation.details),
    )


def _text(value: object, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordError(f"{key} must be a non-empty string")
    return value


def _finite_or_text(value: float | None) -> float | str | None:
    # JSON has no NaN/inf; a NaN error is exactly what a mismatch report must keep.
    if value is None or math.isfinite(value):
        return value
    return str(value)


def _float_or_none(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RecordError(f"{value!r} is not a number")
    return float(value)
