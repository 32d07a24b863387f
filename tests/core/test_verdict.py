"""Verdicts from observations, outcomes against expectations, and claim gaps."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from harness.observation import Claim, Failure, LayerAgreement, LoaderDifferential, Observation
from harness.stages import Stage
from harness.verdict import VERDICTS, ClaimGap, Judgement, Outcome, Verdict, claim_gap, judge, outcome

from .samples import OBSERVATIONS, ran

pytestmark = pytest.mark.pure


def test_vocabulary_is_exact() -> None:
    assert VERDICTS == (
        "pass",
        "unsupported",
        "substituted",
        "wrong-backend",
        "wrong-setting",
        "mismatch",
        "loader-diff",
        "crash",
        "timeout",
        "unavailable",
    )


@pytest.mark.parametrize("verdict", list(Verdict))
def test_every_verdict_is_reachable(verdict: Verdict) -> None:
    assert judge(OBSERVATIONS[verdict]).verdict == verdict


def test_judgement_carries_stage_and_message() -> None:
    crash = Judgement(Verdict.CRASH, Stage.FORWARD, "RuntimeError: illegal memory access")
    assert judge(OBSERVATIONS[Verdict.CRASH]) == crash
    unsupported = judge(OBSERVATIONS[Verdict.UNSUPPORTED])
    assert (unsupported.stage, unsupported.message) == (Stage.SELECT, "sink not supported; head size 40")
    wrong = judge(OBSERVATIONS[Verdict.WRONG_BACKEND])
    assert wrong.stage == Stage.BUILD
    assert (
        wrong.message
        == "requested FLASH_ATTN: the platform selects FLASH_ATTN, but draft layers carry CPU_ATTN, CPU_ATTN"
    )
    mismatch = judge(OBSERVATIONS[Verdict.MISMATCH])
    assert (mismatch.stage, mismatch.message) == (Stage.COMPARE, "max abs error 0.5 > tolerance 0.02 on FLASH_ATTN")
    assert judge(OBSERVATIONS[Verdict.TIMEOUT]).message == "cell ran past its time limit"


def test_the_most_severe_fact_decides() -> None:
    failure = Failure(Stage.METADATA, "ValueError", "bad block table")
    assert judge(Observation("X", failure=failure, timed_out=True)).verdict == Verdict.TIMEOUT
    assert judge(Observation("X", failure=failure, timed_out=True)).stage == Stage.METADATA
    assert judge(Observation("X", failure=failure, rejection=("no",))).verdict == Verdict.CRASH
    assert judge(Observation("X", unavailable="gone", rejection=("no",))).verdict == Verdict.UNAVAILABLE
    # A lost request outranks bad numbers, and bad numbers outrank a swap.
    lost_and_wrong = ran("FLASH_ATTN", ["CPU_ATTN"], platform_choice="FLASH_ATTN", max_abs_err=9.0, tolerance=0.1)
    assert judge(lost_and_wrong).verdict == Verdict.WRONG_BACKEND
    swapped_and_wrong = ran("FLASH_ATTN", ["CPU_ATTN"], max_abs_err=9.0, tolerance=0.1)
    assert judge(swapped_and_wrong).verdict == Verdict.MISMATCH


def test_a_setting_the_draft_did_not_ask_for_names_it_and_outranks_numbers() -> None:
    """The audit's differences (harness.attention.audit) are their own verdict at stage build,
    after a wrong backend (the request itself lost) and before any numbers."""
    window = "model.layers.0.self_attn.attn: sliding_window is 64, the draft asked for none"
    judgement = judge(ran("FLASH_ATTN", lost_settings=(window,), max_abs_err=9.0, tolerance=0.1))
    assert (judgement.verdict, judgement.stage) == (Verdict.WRONG_SETTING, Stage.BUILD)
    assert judgement.message == f"draft layers carry settings they did not ask for: {window}"
    both = ran("FLASH_ATTN", ["CPU_ATTN"], platform_choice="FLASH_ATTN", lost_settings=(window,))
    assert judge(both).verdict == Verdict.WRONG_BACKEND


def test_nan_error_is_a_mismatch_not_a_pass() -> None:
    assert judge(ran("CPU_ATTN", max_abs_err=float("nan"), tolerance=0.1)).verdict == Verdict.MISMATCH


def test_no_draft_layer_is_a_crash_at_build() -> None:
    judgement = judge(Observation("CPU_ATTN", platform_choice="CPU_ATTN"))
    assert (judgement.verdict, judgement.stage) == (Verdict.CRASH, Stage.BUILD)


def test_a_refused_request_that_still_built_is_a_lost_request() -> None:
    # The pre-#46770 loader drops a request the platform would refuse and builds with auto:
    # that is the loader's fault (wrong-backend), never a platform substitution.
    lost = Observation(
        "FLEX_ATTENTION", platform_refusal=("attention sinks not supported",), observed_backends=("FLASH_ATTN",)
    )
    judgement = judge(lost)
    assert (judgement.verdict, judgement.stage) == (Verdict.WRONG_BACKEND, Stage.BUILD)
    assert "attention sinks not supported" in judgement.message
    assert judge(Observation("FLEX_ATTENTION", observed_backends=("FLASH_ATTN",))).verdict == Verdict.SUBSTITUTED


def test_auto_selection_is_never_substituted() -> None:
    assert judge(ran(None, ["CPU_ATTN"])).verdict == Verdict.PASS
    lost = judge(ran(None, ["TRITON_ATTN"], platform_choice="CPU_ATTN"))
    assert (lost.verdict, lost.message.split(":")[0]) == (Verdict.WRONG_BACKEND, "auto-selection")


@pytest.mark.parametrize(
    ("observed", "expected", "how"),
    [
        (Verdict.PASS, Verdict.PASS, Outcome.MATCH),
        (Verdict.PASS, Verdict.UNSUPPORTED, Outcome.UNEXPECTED_PASS),
        (Verdict.SUBSTITUTED, Verdict.CRASH, Outcome.UNEXPECTED_PASS),
        (Verdict.MISMATCH, Verdict.PASS, Outcome.REGRESSION),
        (Verdict.CRASH, Verdict.UNSUPPORTED, Outcome.REGRESSION),
        (Verdict.UNAVAILABLE, Verdict.UNSUPPORTED, Outcome.CHANGED),
        (Verdict.TIMEOUT, Verdict.CRASH, Outcome.CHANGED),
        (Verdict.WRONG_BACKEND, Verdict.MISMATCH, Outcome.CHANGED),
    ],
)
def test_outcome(observed: Verdict, expected: Verdict, how: Outcome) -> None:
    assert outcome(observed, expected) == how


def test_outcome_is_total_and_antisymmetric() -> None:
    flip = {Outcome.UNEXPECTED_PASS: Outcome.REGRESSION, Outcome.REGRESSION: Outcome.UNEXPECTED_PASS}
    for a, b in itertools.product(Verdict, Verdict):
        forward, backward = outcome(a, b), outcome(b, a)
        assert (forward == Outcome.MATCH) == (a == b)
        assert backward == flip.get(forward, forward)


@pytest.mark.parametrize("verdict", list(Verdict))
def test_claim_gaps(verdict: Verdict) -> None:
    fails = verdict in (Verdict.UNSUPPORTED, Verdict.MISMATCH, Verdict.CRASH, Verdict.TIMEOUT)
    assert claim_gap(Claim(True), verdict) == (ClaimGap.OVER_CLAIM if fails else None)
    assert claim_gap(Claim(False, ("no sinks",)), verdict) == (
        ClaimGap.UNDER_CLAIM if verdict == Verdict.PASS else None
    )
    assert claim_gap(None, verdict) is None


def test_observation_is_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        OBSERVATIONS[Verdict.PASS].timed_out = True  # type: ignore[misc]


def _differential(*layers: LayerAgreement) -> LoaderDifferential:
    return LoaderDifferential(layers)


def test_the_loader_differential_wants_bits_from_one_kernel_and_tolerance_across_two() -> None:
    same, other = "TritonAttentionImpl", "FlexAttentionImpl"
    # Within the reference's tolerance either way; only the twin comparison tells them apart.
    base = ran("TRITON_ATTN", max_abs_err=1e-3, tolerance=2e-2)
    agree = dataclasses.replace(base, loader_differential=_differential(LayerAgreement("l0", same, same, True, 0.0)))
    assert judge(agree).verdict == Verdict.PASS
    off = dataclasses.replace(base, loader_differential=_differential(LayerAgreement("l0", same, same, False, 1e-6)))
    judged = judge(off)
    assert (judged.verdict, judged.stage) == (Verdict.LOADER_DIFF, Stage.COMPARE)
    assert "l0 (TritonAttentionImpl both) not bitwise equal, max diff 1e-06" in judged.message
    across = LayerAgreement("l0", same, other, False, 1e-3)
    assert judge(dataclasses.replace(base, loader_differential=_differential(across))).verdict == Verdict.PASS
    far = dataclasses.replace(across, max_abs_diff=0.5)
    assert judge(dataclasses.replace(base, loader_differential=_differential(far))).verdict == Verdict.LOADER_DIFF
    nan = dataclasses.replace(across, max_abs_diff=float("nan"))
    assert judge(dataclasses.replace(base, loader_differential=_differential(nan))).verdict == Verdict.LOADER_DIFF
    # V1's refusal is recorded, never a disagreement; a reference mismatch outranks it; a
    # disagreement outranks a substitution.
    refused = LoaderDifferential(not_comparable="Model Runner V1 does not support: dspark speculative decoding")
    assert judge(dataclasses.replace(base, loader_differential=refused)).verdict == Verdict.PASS
    bad = dataclasses.replace(off, max_abs_err=0.5)
    assert judge(bad).verdict == Verdict.MISMATCH
    swapped = ran("FLASH_ATTN", ["TRITON_ATTN"], max_abs_err=1e-3, tolerance=2e-2)
    assert judge(dataclasses.replace(swapped, loader_differential=off.loader_differential)).verdict == (
        Verdict.LOADER_DIFF
    )


def test_a_lost_request_stays_the_verdict_and_names_the_settings_the_layers_also_carry() -> None:
    lost = ("model.layers.0.self_attn.attn: sinks is False, the draft asked for True",)
    refused = Observation(
        "FLEX_ATTENTION",
        platform_refusal=("attention sinks not supported",),
        observed_backends=("FLASH_ATTN",),
        lost_settings=lost,
    )
    stray = Observation(
        "TRITON_ATTN", platform_choice="TRITON_ATTN", observed_backends=("FLASH_ATTN",), lost_settings=lost
    )
    for observation in (refused, stray):
        judgement = judge(observation)
        assert judgement.verdict == Verdict.WRONG_BACKEND
        assert judgement.message.endswith(f"; draft layers also carry settings they did not ask for: {lost[0]}")
    assert (
        judge(
            Observation(
                "TRITON_ATTN", platform_choice="TRITON_ATTN", observed_backends=("TRITON_ATTN",), lost_settings=lost
            )
        ).verdict
        == Verdict.WRONG_SETTING
    )
