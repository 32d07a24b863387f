"""The verdict vocabulary and the pure function that derives a verdict from an observation."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from harness.observation import Claim, Observation

# A verdict names the stage it was decided at.
from harness.stages import Stage


class Verdict(StrEnum):
    PASS = "pass"
    UNSUPPORTED = "unsupported"  # cleanly rejected, with reasons
    SUBSTITUTED = "substituted"  # the platform ran another backend than the one requested
    WRONG_BACKEND = "wrong-backend"  # the loader lost the request (the PR #46770 regression)
    # A draft layer carries another setting than its draft asked for (a window, a KV-cache dtype,
    # a prefix-LM flag, ...): taken from the target somewhere in the draft config's derivation.
    WRONG_SETTING = "wrong-setting"
    MISMATCH = "mismatch"  # numerics beyond tolerance
    # The loader-v2 draft's layer outputs differ from Model Runner V1's draft of the same
    # checkpoint on the same inputs (vLLM #49559), even if both are within tolerance of the reference.
    LOADER_DIFF = "loader-diff"
    CRASH = "crash"  # unexpected exception or process death; stage says where
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"  # backend or API not installed/importable here


VERDICTS: tuple[str, ...] = tuple(v.value for v in Verdict)


class Outcome(StrEnum):
    """How an observed verdict relates to the expected one."""

    MATCH = "match"
    UNEXPECTED_PASS = "unexpected-pass"  # better than expected: the expectation is out of date
    REGRESSION = "regression"  # worse than expected
    CHANGED = "changed"  # different, neither better nor worse (e.g. unsupported <-> unavailable)


# Best to worst, in tiers: a verdict in a later tier is worse (a regression), two verdicts of one tier
# differ without either being worse (`changed`). Defined once: the outcome of a cell, the order every
# report lists verdicts in, and which copy of a cell a merge keeps all derive from it.
_TIERS: tuple[tuple[Verdict, ...], ...] = (
    (Verdict.PASS,),
    (Verdict.SUBSTITUTED,),
    (Verdict.UNAVAILABLE, Verdict.UNSUPPORTED),
    (Verdict.WRONG_BACKEND, Verdict.WRONG_SETTING, Verdict.MISMATCH, Verdict.LOADER_DIFF),
    (Verdict.TIMEOUT, Verdict.CRASH),
)
_RANK = {verdict: tier for tier, members in enumerate(_TIERS) for verdict in members}
VERDICT_ORDER: tuple[Verdict, ...] = tuple(verdict for members in _TIERS for verdict in members)


# Verdicts that say vLLM (or the harness) did something wrong with the request: a lost request,
# wrong numbers, a crash, a hang. The others are answers: served, swapped, refused, absent. An
# expectation rule that records a fault must name its finding (harness/expectations.py), so a
# bug never hides as a plain expected verdict.
FAULTS: frozenset[Verdict] = frozenset(v for v in VERDICT_ORDER if _RANK[v] > _RANK[Verdict.UNSUPPORTED])


def severity(verdict: Verdict) -> int:
    """Position in VERDICT_ORDER: higher is worse, and no two verdicts tie."""
    return VERDICT_ORDER.index(verdict)


def outcome(observed: Verdict, expected: Verdict) -> Outcome:
    if observed == expected:
        return Outcome.MATCH
    if _RANK[observed] < _RANK[expected]:
        return Outcome.UNEXPECTED_PASS
    if _RANK[observed] > _RANK[expected]:
        return Outcome.REGRESSION
    return Outcome.CHANGED


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    stage: Stage | None
    message: str


def judge(obs: Observation) -> Judgement:
    """Most severe fact first: a crash hides everything after it, a lost request
    matters more than the numbers it produced, wrong numbers matter more than a swap."""
    if obs.timed_out:
        stage = obs.failure.stage if obs.failure else None
        return Judgement(Verdict.TIMEOUT, stage, obs.failure.message if obs.failure else "cell ran past its time limit")
    if obs.failure is not None:
        return Judgement(Verdict.CRASH, obs.failure.stage, f"{obs.failure.error_type}: {obs.failure.message}")
    if obs.unavailable is not None:
        return Judgement(Verdict.UNAVAILABLE, None, obs.unavailable)
    if obs.rejection is not None:
        stage = obs.rejection_stage or Stage.SELECT
        return Judgement(Verdict.UNSUPPORTED, stage, "; ".join(obs.rejection) or "rejected without reasons")
    if not obs.observed_backends:
        return Judgement(Verdict.CRASH, Stage.BUILD, "lane reported no draft attention layer")
    wanted = obs.requested_backend
    layers = ", ".join(obs.observed_backends)
    # A lost request is the verdict where the layers also carry settings they did not ask for; the
    # settings are named beside it, never dropped.
    also = f"; draft layers also carry settings they did not ask for: {'; '.join(obs.lost_settings)}"
    beside = also if obs.lost_settings else ""
    if obs.platform_refusal is not None:
        reasons = "; ".join(obs.platform_refusal) or "no reasons given"
        return Judgement(
            Verdict.WRONG_BACKEND,
            Stage.BUILD,
            f"the platform refuses {wanted or 'auto-selection'} ({reasons}), yet draft layers carry {layers}: "
            f"the loader never passed the request on{beside}",
        )
    choices = obs.layer_choices or (obs.platform_choice,) * len(obs.observed_backends)
    strays = sorted({b for b, c in zip(obs.observed_backends, choices, strict=False) if b != c})
    if obs.platform_choice is not None and strays:
        what = f"requested {wanted}" if wanted else "auto-selection"
        selects = ", ".join(dict.fromkeys(str(c) for c in choices))
        return Judgement(
            Verdict.WRONG_BACKEND,
            Stage.BUILD,
            f"{what}: the platform selects {selects}, but draft layers carry {layers}{beside}",
        )
    if obs.lost_settings:
        return Judgement(
            Verdict.WRONG_SETTING,
            Stage.BUILD,
            f"draft layers carry settings they did not ask for: {'; '.join(obs.lost_settings)}",
        )
    if obs.max_abs_err is not None and obs.tolerance is not None and not obs.max_abs_err <= obs.tolerance:
        return Judgement(
            Verdict.MISMATCH,
            Stage.COMPARE,
            f"max abs error {obs.max_abs_err:.3g} > tolerance {obs.tolerance:.3g} on {layers}",
        )
    differs = obs.loader_differential.disagreements(obs.tolerance) if obs.loader_differential else ()
    if differs:
        return Judgement(
            Verdict.LOADER_DIFF,
            Stage.COMPARE,
            f"Model Runner V1's draft of the same checkpoint disagrees on the same inputs: {'; '.join(differs)}",
        )
    if wanted is not None and any(b != wanted for b in obs.observed_backends):
        return Judgement(Verdict.SUBSTITUTED, None, f"requested {wanted}, ran {layers}")
    if obs.max_abs_err is not None:
        return Judgement(Verdict.PASS, None, f"{layers}: max abs error {obs.max_abs_err:.3g} <= {obs.tolerance:.3g}")
    return Judgement(Verdict.PASS, None, f"draft layers carry {layers}")


class ClaimGap(StrEnum):
    OVER_CLAIM = "over-claim"  # claims support, but the cell fails
    UNDER_CLAIM = "under-claim"  # claims no support, but the cell works


_FAILS = {Verdict.UNSUPPORTED, Verdict.MISMATCH, Verdict.CRASH, Verdict.TIMEOUT}


def claim_gap(claim: Claim | None, verdict: Verdict) -> ClaimGap | None:
    if claim is None:
        return None
    if claim.supported and verdict in _FAILS:
        return ClaimGap.OVER_CLAIM
    if not claim.supported and verdict == Verdict.PASS:
        return ClaimGap.UNDER_CLAIM
    return None
