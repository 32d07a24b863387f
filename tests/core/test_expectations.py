"""Expectation files: last matching rule wins, message substrings, stale rules, bad input."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness.errors import InputError
from harness.expectations import (
    NO_EXPECTATIONS,
    Expectation,
    ExpectationSet,
    Rule,
    describe_release,
    describe_stale,
    expectations_for,
    load_expectations,
)
from harness.findings import Finding, FindingKind
from harness.matrix import Cell, expand, load_matrix, selector_matches
from harness.result import decide
from harness.verdict import Outcome, Verdict

from .samples import OBSERVATIONS, RULES, cell_named, matrix_from, write

pytestmark = pytest.mark.pure


def test_last_matching_rule_wins_and_default_covers_the_rest(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=RULES)
    expectations = expectations_for(matrix)
    decided = {cell.id: expectations.for_cell(cell) for cell in expand(matrix)}
    assert decided["FLASH_ATTN-causal-nosink-bf16"].verdict == Verdict.SUBSTITUTED
    assert decided["FLASH_ATTN-causal-nosink-bf16"].message == "CPU_ATTN"
    assert decided["FLASH_ATTN-causal-sink-bf16"].verdict == Verdict.UNSUPPORTED  # later rule wins
    assert decided["FLASH_ATTN-causal-sink-bf16"].describe() == "rule 1: no sink support"
    assert decided["CPU_ATTN-noncausal-sink-bf16"].verdict == Verdict.MISMATCH
    default = decided["CPU_ATTN-causal-sink-bf16"]
    assert (default.verdict, default.rule, default.describe()) == (Verdict.PASS, None, "CPU_ATTN serves every shape")


def test_no_expectations_file_expects_pass(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path)
    assert expectations_for(matrix) is NO_EXPECTATIONS
    assert all(NO_EXPECTATIONS.for_cell(cell).verdict == Verdict.PASS for cell in expand(matrix))


def test_a_rule_that_decides_no_cell_is_stale(tmp_path: Path) -> None:
    rules = (
        RULES
        + """
[[expect]]
when = { backend = "CPU_ATTN", dtype = "float16" }
verdict = "crash"
finding = "bf16-noncausal-drift"
reason = "matches nothing: no float16 cell"

[[expect]]
when = { backend = "FLASH_ATTN" }
verdict = "timeout"
finding = "bf16-noncausal-drift"
reason = "shadows rules 0 and 1 entirely"
"""
    )
    matrix = matrix_from(tmp_path, expectations=rules)
    expectations = expectations_for(matrix)
    cells = expand(matrix)
    assert [rule.index for rule in expectations.stale_rules(cells)] == [0, 1, 3]
    stale = describe_stale(expectations, cells)
    assert stale[2] == "expect.toml: expect[3] (matches nothing: no float16 cell) matches no cell that it decides"
    assert describe_stale(expectations, [c for c in cells if c.get("backend") == "CPU_ATTN"])[-1].startswith(
        "expect.toml: expect[4]"
    )


def test_unexpected_pass_is_reported_not_accepted(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=RULES)
    cell = cell_named(matrix, "FLASH_ATTN-causal-sink-bf16")  # expected unsupported
    result = decide(cell, OBSERVATIONS[Verdict.PASS], expectations_for(matrix).for_cell(cell))
    assert (result.verdict, result.expected, result.outcome) == (
        Verdict.PASS,
        Verdict.UNSUPPORTED,
        Outcome.UNEXPECTED_PASS,
    )
    assert not result.ok


def test_message_substring_must_appear_in_the_cell_message(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=RULES)
    cell = cell_named(matrix, "FLASH_ATTN-causal-nosink-bf16")  # substituted, message must contain CPU_ATTN
    expectation = expectations_for(matrix).for_cell(cell)
    right = decide(cell, OBSERVATIONS[Verdict.SUBSTITUTED], expectation)
    assert right.message == "requested FLASH_ATTN, ran CPU_ATTN"
    assert right.outcome == Outcome.MATCH
    wrong_reason = decide(cell, OBSERVATIONS[Verdict.SUBSTITUTED], dataclasses.replace(expectation, message="TRITON"))
    assert (wrong_reason.verdict, wrong_reason.outcome) == (Verdict.SUBSTITUTED, Outcome.CHANGED)


BAD_RULES = {
    "verdict-not-in-vocabulary": (
        '[[expect]]\nwhen = { backend = "FLASH_ATTN" }\nverdict = "broken"\nreason = "r"\n',
        ["expect[0].verdict", "'broken' is not a verdict", "pass, unsupported, substituted, wrong-backend"],
    ),
    "default-not-in-vocabulary": ('[expectations]\ndefault = "ok"\n', ["expectations.default", "'ok'"]),
    "axis-not-in-matrix": (
        '[[expect]]\nwhen = { loader = "v2" }\nverdict = "pass"\nreason = "r"\n',
        ["expect[0].when.loader", "does not have", "valid: backend, causal, sink, dtype"],
    ),
    "value-invalid": (
        '[[expect]]\nwhen = { causal = "maybe" }\nverdict = "pass"\nreason = "r"\n',
        ["expect[0].when.causal", "not a boolean"],
    ),
    "no-reason": ('[[expect]]\nwhen = { sink = true }\nverdict = "pass"\n', ["expect[0].reason", "needs a reason"]),
    "no-when": ('[[expect]]\nverdict = "pass"\nreason = "r"\n', ["expect[0].when", "missing"]),
    "unknown-key": ('[[expect]]\nwhen = { sink = true }\nverdict = "pass"\nreason = "r"\nwhy = 1\n', ["expect[0].why"]),
    "toml-syntax": ("[[expect]\n", ["TOML syntax error"]),
}


@pytest.mark.parametrize("case", sorted(BAD_RULES))
def test_bad_expectations_are_one_line_naming_file_key_and_choices(tmp_path: Path, case: str) -> None:
    text, fragments = BAD_RULES[case]
    matrix = matrix_from(tmp_path)
    path = write(tmp_path, "bad-expect.toml", text)
    with pytest.raises(InputError) as caught:
        load_expectations(path, matrix)
    line = caught.value.line()
    assert "\n" not in line and line.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in line


# Rules per vLLM release: RULES' FLASH_ATTN sink cells were refused before 0.30 and pass from 0.30 on.
VERSIONED = (
    RULES.replace(
        'reason = "CPU_ATTN serves every shape"',
        'reason = "CPU_ATTN serves every shape"\nreleases = ["0.24.0", "0.30.0", "0.33.0"]',
    )
    + """
[[expect]]
when = { backend = "FLASH_ATTN", sink = true }
vllm = ">=0.30"
verdict = "pass"
reason = "sinks reach FLASH_ATTN from 0.30 on"

[[expect]]
when = { backend = "CPU_ATTN", causal = false }
vllm = "==0.24.*"
verdict = "crash"
finding = "bf16-noncausal-drift"
reason = "0.24 crashed on non-causal CPU_ATTN"
"""
)


def test_versioned_rules_hold_only_for_their_releases(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=VERSIONED)
    sink = cell_named(matrix, "FLASH_ATTN-causal-sink-bf16")
    noncausal = cell_named(matrix, "CPU_ATTN-noncausal-nosink-bf16")
    verdicts = {
        release: (
            expectations_for(matrix, release).for_cell(sink).verdict,
            expectations_for(matrix, release).for_cell(noncausal).verdict,
        )
        for release in ("0.24.0", "0.29.9", "0.30.0", "0.33.0", "0.34.0.dev12+g1234abc")
    }
    assert verdicts == {
        "0.24.0": (Verdict.UNSUPPORTED, Verdict.CRASH),
        "0.29.9": (Verdict.UNSUPPORTED, Verdict.MISMATCH),
        "0.30.0": (Verdict.PASS, Verdict.MISMATCH),
        "0.33.0": (Verdict.PASS, Verdict.MISMATCH),
        "0.34.0.dev12+g1234abc": (Verdict.PASS, Verdict.MISMATCH),  # a dev build is judged like its release
    }
    # An unknown release (no vLLM installed) satisfies no range: only the unversioned rules hold.
    assert expectations_for(matrix).for_cell(sink).verdict == Verdict.UNSUPPORTED


def test_a_versioned_rule_is_stale_only_when_no_recorded_release_uses_it(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=VERSIONED)
    cells = expand(matrix)
    for release in ("0.24.0", "0.33.0", None):
        # Judged as any release, the 0.24 rule and the >=0.30 rule each decide cells in some recorded release.
        assert expectations_for(matrix, release).stale_rules(cells) == ()
    never = (
        VERSIONED + '\n[[expect]]\nwhen = { sink = true }\nvllm = ">=0.25,<0.30"\nverdict = "timeout"\n'
        'finding = "bf16-noncausal-drift"\nreason = "r"\n'
    )
    matrix = matrix_from(tmp_path, expectations=never)
    stale = describe_stale(expectations_for(matrix, "0.33.0"), expand(matrix))
    assert stale == ["expect.toml: expect[5] (r) matches no cell that it decides in any recorded release"]


def test_a_run_of_an_unrecorded_release_says_so(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=VERSIONED)
    assert describe_release(expectations_for(matrix, "0.33.0")) is None
    assert describe_release(expectations_for(matrix, "0.31.0")) == (
        "expect.toml records vLLM 0.24.0, 0.30.0, 0.33.0; this run's 0.31.0 is judged by the rules whose range holds it"
    )
    assert describe_release(expectations_for(matrix_from(tmp_path, expectations=RULES), "0.31.0")) is None


BAD_VERSIONS = {
    "range-not-pep440": (
        '[[expect]]\nwhen = { sink = true }\nvllm = "from 0.25"\nverdict = "pass"\nreason = "r"\n',
        ["expect[0].vllm", "'from 0.25' is not a PEP 440 version range", ">=0.25,<0.30"],
    ),
    "range-not-a-string": (
        '[[expect]]\nwhen = { sink = true }\nvllm = 0.25\nverdict = "pass"\nreason = "r"\n',
        ["expect[0].vllm", "0.25"],
    ),
    "release-not-pep440": (
        '[expectations]\nreleases = ["0.33.0", "latest"]\n',
        ["expectations.releases", "'latest' is not a PEP 440 version"],
    ),
    "releases-not-a-list": ('[expectations]\nreleases = "0.33.0"\n', ["expectations.releases", "must be a list"]),
}


@pytest.mark.parametrize("case", sorted(BAD_VERSIONS))
def test_bad_versions_are_one_line_naming_file_and_key(tmp_path: Path, case: str) -> None:
    text, fragments = BAD_VERSIONS[case]
    path = write(tmp_path, "bad-expect.toml", text)
    with pytest.raises(InputError) as caught:
        load_expectations(path, matrix_from(tmp_path))
    line = caught.value.line()
    assert "\n" not in line and line.startswith(f"{path}: ")
    for fragment in fragments:
        assert fragment in line


def test_judging_by_the_rule_index_agrees_with_matching_each_rule_in_turn() -> None:
    # for_cell judges through bit sets per axis value; the plain reading of the file is "the last
    # rule whose selector matches wins, and without a finding the last rule naming none".
    rng = random.Random(7)
    axes = {"backend": ("A", "B", "C"), "causal": (True, False), "layers": (1, 2, 3), "extra": ("x", "y")}
    bug = Finding("bug", "a bug", FindingKind.UPSTREAM_BUG, SpecifierSet(">=0.1"), Version("0.1"), "here", "unreported")
    rules = []
    for index in range(40):
        named = rng.sample(sorted(axes), rng.randint(0, 3))
        when = tuple((axis, tuple(rng.sample(axes[axis], rng.randint(1, len(axes[axis]))))) for axis in named)
        verdict = rng.choice((Verdict.PASS, Verdict.UNSUPPORTED, Verdict.WRONG_BACKEND))
        finding = bug if verdict is Verdict.WRONG_BACKEND else None
        rules.append(Rule(index, when, Expectation(verdict, f"r{index}", rule=index, finding=finding)))
    default = Expectation(Verdict.PASS, "default")
    expectations = ExpectationSet(path=None, default=default, rules=tuple(rules))

    for number in range(300):
        present = [axis for axis in axes if axis != "extra" or rng.random() < 0.5]  # some cells lack an axis
        cell = Cell(f"c{number}", "lane", tuple((axis, rng.choice(axes[axis])) for axis in present), None, 1.0)
        matched = [rule.expectation for rule in rules if selector_matches(rule.when, cell.values)]
        plain = [expectation for expectation in matched if expectation.finding is None]
        got = expectations.for_cell(cell)
        assert got.rule == (matched[-1].rule if matched else None)
        if got.finding is not None:
            assert got.correct == (plain[-1] if plain else default)


SHIPPED = sorted((Path(__file__).resolve().parents[2] / "matrices").glob("*.toml"))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda path: path.stem)
def test_no_shipped_rule_is_stale_in_any_recorded_release(path: Path) -> None:
    """A lane's run fails on a stale rule (expectations-stale), but only once its vLLM env is
    built; a rule shadowed by a later one, or written for a cell the covering does not draw, is
    caught here in milliseconds instead."""
    matrix = load_matrix(path)
    assert describe_stale(expectations_for(matrix), expand(matrix)) == []


HOST_RULES = (
    RULES
    + """
[[expect]]
when = { backend = "CPU_ATTN", sink = true }
host_isa = ["avx2"]
verdict = "crash"
finding = "bf16-noncausal-drift"
reason = "the kernel this host's ISA selects has no sink path"
"""
)


def test_a_host_isa_rule_holds_only_where_the_lane_reports_that_host(tmp_path: Path) -> None:
    matrix = matrix_from(tmp_path, expectations=HOST_RULES)
    expectations = expectations_for(matrix)
    assert expectations.host_isas == ("avx2",)
    sink = cell_named(matrix, "CPU_ATTN-causal-sink-bf16")
    assert expectations.for_cell(sink).verdict != Verdict.CRASH  # host unknown: the rule holds for none
    assert expectations.for_host("avx512").for_cell(sink).verdict != Verdict.CRASH
    assert expectations.for_host("avx2").for_cell(sink).verdict == Verdict.CRASH
    # Judged on each host it names, the rule decides cells: not stale on an AVX-512 run either.
    assert 3 not in [rule.index for rule in expectations.for_host("avx512").stale_rules(expand(matrix))]


@pytest.mark.parametrize("value", ['"avx9"', "[]", "3", '["avx2", "sse"]'])
def test_a_host_isa_that_is_no_isa_is_one_input_error(tmp_path: Path, value: str) -> None:
    rules = HOST_RULES.replace('host_isa = ["avx2"]', f"host_isa = {value}")
    with pytest.raises(InputError) as error:
        expectations_for(matrix_from(tmp_path, expectations=rules))
    assert "expect[3].host_isa" in error.value.line() and "avx512" in error.value.line()
