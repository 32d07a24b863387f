"""A judged cell: the record the journal stores and matrix.json lists (the contract).

matrix.json ``cells[]`` items carry at least: id, axes, requested_backend,
observed_backends, verdict, expected, stage, message, max_abs_err, tolerance,
claim, duration_s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from harness.axes import CELL_ID
from harness.errors import InputError
from harness.expectations import Expectation
from harness.findings import Finding
from harness.matrix import LANES, Cell
from harness.observation import HOST_LIMIT, Claim, Observation, json_safe
from harness.stages import STAGES, Stage
from harness.verdict import FAULTS, VERDICTS, ClaimGap, Outcome, Verdict, claim_gap, judge, outcome

# How the selection lane's details begin where no draft was built (harness/lanes/selection/process_state.py).
NOT_BUILT = "not built"


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
    # The known bug (harness.findings) the cell's expectation records, and what the cell would get
    # without it (the rule it falls to without the finding): both or neither.
    finding: Finding | None = None
    correct: Expectation | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.MATCH

    @property
    def host_limited(self) -> bool:
        """The host could not answer what vLLM asked (observation.HOST_LIMIT): no verdict on vLLM."""
        return self.verdict == Verdict.UNAVAILABLE and self.message.startswith(HOST_LIMIT)

    @property
    def reached_draft(self) -> bool:
        """vLLM's loader built this cell's draft, so its answer is about the draft (issue 38's
        strength 3 counts only such cells): not a release or host that cannot answer, not a refusal
        or crash at config or selection (the target's or the draft's own request), not a target that
        failed first. A refusal at start-up comes after the build and counts."""
        if self.verdict == Verdict.UNAVAILABLE or self.stage in (Stage.CONFIG, Stage.SELECT):
            return False
        return not str(self.details.get("draft", "")).startswith(NOT_BUILT)

    @property
    def unrecorded_fault(self) -> bool:
        """A fault no finding records: the cell fails in a way nobody has filed yet (a new bug)."""
        return self.verdict in FAULTS and self.verdict != self.expected

    @property
    def fixed(self) -> bool:
        """The cell no longer shows its finding: it gets what it would without it, not the finding's verdict."""
        if self.finding is None or self.correct is None or self.verdict == self.expected:
            return False
        return self.verdict in self.finding.correct_verdicts(self.correct.verdict)

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
            "max_abs_err": json_safe(self.max_abs_err),
            "tolerance": self.tolerance,
            "claim": {"supported": self.claim.supported, "reasons": list(self.claim.reasons)} if self.claim else None,
            "claim_gap": self.claim_gap.value if self.claim_gap else None,
            "duration_s": round(self.duration_s, 4),
            "details": self.details,
            "finding": self.finding.to_json() if self.finding else None,
            "correct": _expectation_json(self.correct) if self.correct else None,
        }

    @classmethod
    def from_json(cls, data: object) -> CellResult:
        """Read a stored record back, trusting nothing: a journal may be truncated, hand-edited
        or hostile. Derived fields (outcome, claim_gap) are recomputed, and a stored value that
        contradicts them is refused rather than reported."""
        if not isinstance(data, dict):
            raise RecordError("a cell record must be a JSON object")
        try:
            verdict = Verdict(_choice(data, "verdict", VERDICTS))
            expected = Verdict(_choice(data, "expected", VERDICTS))
            stage = Stage(_choice(data, "stage", STAGES)) if data.get("stage") is not None else None
            message = _optional_text(data, "message") or ""
            expected_message = _optional_text(data, "expected_message")
            claim = _claim(data.get("claim"))
            how = _outcome(verdict, expected, expected_message, message)
            if data.get("outcome", how.value) != how.value:
                raise RecordError(f"outcome {data['outcome']!r} contradicts verdict {verdict} / expected {expected}")
            gap = claim_gap(claim, verdict)
            if data.get("claim_gap") != (gap.value if gap else None):
                raise RecordError(f"claim_gap {data.get('claim_gap')!r} contradicts claim and verdict {verdict}")
            ident = _text(data["id"], "id")
            if not CELL_ID.match(ident):
                raise RecordError(f"id {ident!r} is not a cell id (letters, digits, '_' and '.', joined by '-')")
            details = data.get("details") or {}
            if not isinstance(details, dict):
                raise RecordError("details must be an object")
            finding, correct = _finding(data.get("finding")), _correct(data.get("correct"))
            if (finding is None) != (correct is None):
                raise RecordError("finding and correct come together: a finding's cell says what it gets without it")
            return cls(
                id=ident,
                lane=_choice(data, "lane", LANES),
                axes=_axes(data["axes"]),
                requested_backend=_optional_text(data, "requested_backend"),
                observed_backends=_texts(data.get("observed_backends", []), "observed_backends"),
                platform_choice=_optional_text(data, "platform_choice"),
                verdict=verdict,
                expected=expected,
                expected_reason=_optional_text(data, "expected_reason") or "",
                expected_message=expected_message,
                outcome=how,
                stage=stage,
                message=message,
                max_abs_err=_float_or_none(data.get("max_abs_err")),
                tolerance=_float_or_none(data.get("tolerance")),
                claim=claim,
                claim_gap=gap,
                duration_s=_float_or_none(data.get("duration_s", 0.0)) or 0.0,
                details=details,
                finding=finding,
                correct=correct,
            )
        except KeyError as exc:
            raise RecordError(f"missing key {exc.args[0]!r}") from None


def decide(cell: Cell, observation: Observation, expectation: Expectation) -> CellResult:
    """The one place where an observation meets its expectation."""
    judgement = judge(observation)
    how = _outcome(judgement.verdict, expectation.verdict, expectation.message, judgement.message)
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
        details=_details(observation),
        finding=expectation.finding,
        correct=expectation.correct,
    )


def _expectation_json(expectation: Expectation) -> dict[str, Any]:
    return {"verdict": expectation.verdict.value, "message": expectation.message, "reason": expectation.describe()}


def _finding(value: object) -> Finding | None:
    if value is None:
        return None
    try:
        return Finding.from_json(value)
    except InputError as error:
        raise RecordError(error.line()) from None


def _correct(value: object) -> Expectation | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RecordError("correct must be null or an object with the verdict, message and reason without the finding")
    return Expectation(
        Verdict(_choice(value, "verdict", VERDICTS)),
        _optional_text(value, "reason") or "",
        _optional_text(value, "message"),
    )


def _details(observation: Observation) -> dict[str, Any]:
    details = dict(observation.details)
    if observation.retire_process:
        details["process_retired"] = observation.retire_process
    if observation.loader_differential is not None:
        details["loader_differential"] = observation.loader_differential.to_json()
    return details


def _outcome(verdict: Verdict, expected: Verdict, expected_message: str | None, message: str) -> Outcome:
    how = outcome(verdict, expected)
    if how == Outcome.MATCH and expected_message and expected_message not in message:
        return Outcome.CHANGED  # right verdict, wrong reason: the cell fails for a reason nobody vetted
    return how


def _choice(data: dict[str, Any], key: str, choices: tuple[str, ...]) -> str:
    value = data[key]
    if not isinstance(value, str) or value not in choices:
        raise RecordError(f"{key} {value!r} is not one of: {', '.join(choices)}")
    return value


def _optional_text(data: dict[str, Any], key: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise RecordError(f"{key} must be a string or null, not {type(value).__name__}")
    return value


def _texts(value: object, key: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise RecordError(f"{key} must be a list of strings")
    return tuple(value)


def _axes(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not value:
        raise RecordError("axes must be a non-empty object of axis = value")
    for name, axis_value in value.items():
        if not isinstance(axis_value, str | int | float | bool):
            raise RecordError(f"axes.{name} must be a string, number or boolean")
    return dict(value)


def _claim(value: object) -> Claim | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("supported"), bool):
        raise RecordError("claim must be null or an object with a boolean 'supported'")
    return Claim(value["supported"], _texts(value.get("reasons", []), "claim.reasons"))


def _text(value: object, key: str) -> str:
    if not isinstance(value, str) or not value:
        raise RecordError(f"{key} must be a non-empty string")
    return value


def _float_or_none(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RecordError(f"{value!r} is not a number")
    try:
        # Strings only for what to_json writes for non-finite errors ("nan", "inf").
        return float(value)
    except ValueError:
        raise RecordError(f"{value!r} is not a number") from None
