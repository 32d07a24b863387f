"""Expectations: data, kept outside the code, saying which verdict each cell should get.

    [expectations]
    default = "pass"                 # for cells no rule matches (optional)

    [[expect]]
    when = { backend = "FLASH_ATTN" }
    verdict = "substituted"
    message = "CPU_ATTN"             # optional: the cell's message must contain this
    reason = "CpuPlatform runs CPU_ATTN whatever is requested"

The last rule that matches a cell wins, so general rules go first and exceptions after.
A rule that no cell ends up using is stale and is reported, as array-api-tests does
for its skip files: an expectation that guards nothing is a lie waiting to happen.

Behaviour differs between vLLM releases, so a rule may hold for some of them only::

    [expectations]
    releases = ["0.24.0", "0.33.0"]  # the releases whose behaviour this file records

    [[expect]]
    when = { backend = "TRITON_ATTN", sink = true }
    vllm = "<0.25"                   # PEP 440 specifiers, matched against the run's vLLM
    verdict = "wrong-backend"
    reason = "before PR #46770 the v2 loader drops the request"

A run is judged by the rules whose ``vllm`` range holds its release (a rule without one
holds for every release). With ``releases`` recorded, a rule is stale when it decides no
cell in any of them: a rule for 0.24.0 is not stale because today's run is 0.33.0.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from harness.axes import AXIS_NAMES
from harness.errors import InputError
from harness.matrix import Cell, Matrix, Selector, read_selector, selector_matches
from harness.tomlfile import array_of_tables, only_keys, read_toml
from harness.verdict import VERDICTS, Verdict

_RULE_KEYS = ("when", "vllm", "verdict", "message", "reason")


@dataclass(frozen=True)
class Expectation:
    verdict: Verdict
    reason: str
    message: str | None = None
    rule: int | None = None  # index of the rule in its file; None = the file's default

    def describe(self) -> str:
        return self.reason if self.rule is None else f"rule {self.rule}: {self.reason}"


@dataclass(frozen=True)
class Rule:
    index: int
    when: Selector
    expectation: Expectation
    vllm: SpecifierSet | None = None  # the releases the rule holds for; None = every release

    def holds_for(self, release: Version | None) -> bool:
        if self.vllm is None:
            return True
        # An unknown release satisfies no range; a dev build (0.34.0.dev12+g1234) is judged like its release.
        return release is not None and self.vllm.contains(release, prereleases=True)


@dataclass(frozen=True)
class ExpectationSet:
    path: Path | None
    default: Expectation
    rules: tuple[Rule, ...] = ()
    releases: tuple[Version, ...] = ()  # the vLLM releases whose behaviour the file records
    release: Version | None = None  # the run's vLLM release, which picks the versioned rules

    def for_release(self, release: str | Version | None) -> ExpectationSet:
        """The same rules, judging a run of ``release`` (None: unknown, versioned rules hold for none)."""
        if release is not None and not isinstance(release, Version):
            release = parse_release(release)
        return dataclasses.replace(self, release=release)

    @functools.cached_property
    def _rules_in_force(self) -> tuple[Rule, ...]:
        # Asked once per set, not per cell: a stale check judges every cell under every recorded release.
        return tuple(rule for rule in self.rules if rule.holds_for(self.release))

    def for_cell(self, cell: Cell) -> Expectation:
        values = cell.values
        chosen = self.default
        for rule in self._rules_in_force:
            if selector_matches(rule.when, values):
                chosen = rule.expectation
        return chosen

    @property
    def release_recorded(self) -> bool:
        """False when the file records releases and the run's is not one of them."""
        return not self.releases or self.release in self.releases

    def stale_rules(self, cells: Iterable[Cell]) -> tuple[Rule, ...]:
        cells = tuple(cells)
        judged = [self.for_release(release) for release in self.releases] if self.releases else [self]
        used = {expectations.for_cell(cell).rule for expectations in judged for cell in cells}
        return tuple(rule for rule in self.rules if rule.index not in used)


def parse_release(text: str) -> Version:
    """A vLLM version string as a PEP 440 version; ValueError names the text."""
    try:
        return Version(text)
    except InvalidVersion:
        raise ValueError(f"{text!r} is not a PEP 440 version (e.g. 0.33.0)") from None


NO_EXPECTATIONS = ExpectationSet(
    path=None, default=Expectation(Verdict.PASS, "no expectations file: every cell should pass")
)


def _verdict(path: Path, key: str, value: object) -> Verdict:
    if not isinstance(value, str) or value not in VERDICTS:
        raise InputError(path, key, f"{value!r} is not a verdict", VERDICTS)
    return Verdict(value)


def load_expectations(path: str | Path, matrix: Matrix | None = None) -> ExpectationSet:
    path = Path(path)
    raw = read_toml(path)
    only_keys(path, "", raw, ("expectations", "expect"))
    head = raw.get("expectations", {})
    if not isinstance(head, dict):
        raise InputError(path, "expectations", "must be a table")
    only_keys(path, "expectations", head, ("default", "reason", "releases"))
    default = Expectation(
        verdict=_verdict(path, "expectations.default", head.get("default", "pass")),
        reason=str(head.get("reason", "default expectation")),
    )
    releases = _releases(path, head.get("releases", []))
    rules = []
    for index, table in enumerate(array_of_tables(path, raw, "expect")):
        key = f"expect[{index}]"
        only_keys(path, key, table, _RULE_KEYS)
        when = table.get("when")
        if not isinstance(when, dict):
            raise InputError(path, f"{key}.when", "missing table of axis = value(s)", AXIS_NAMES)
        reason = table.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            raise InputError(path, f"{key}.reason", "every rule needs a reason for humans")
        message = table.get("message")
        if message is not None and not isinstance(message, str):
            raise InputError(path, f"{key}.message", "must be a string the cell message contains")
        rules.append(
            Rule(
                index=index,
                when=read_selector(path, f"{key}.when", when, matrix.all_axes if matrix else None),
                expectation=Expectation(_verdict(path, f"{key}.verdict", table.get("verdict")), reason, message, index),
                vllm=_specifiers(path, f"{key}.vllm", table.get("vllm")),
            )
        )
    return ExpectationSet(path=path, default=default, rules=tuple(rules), releases=releases)


def _releases(path: Path, raw: object) -> tuple[Version, ...]:
    if not isinstance(raw, list) or not all(isinstance(text, str) for text in raw):
        raise InputError(path, "expectations.releases", 'must be a list of vLLM versions, e.g. ["0.33.0"]')
    releases = []
    for text in raw:
        try:
            releases.append(parse_release(text))
        except ValueError as exc:
            raise InputError(path, "expectations.releases", str(exc)) from None
    return tuple(sorted(set(releases)))


def _specifiers(path: Path, key: str, raw: object) -> SpecifierSet | None:
    if raw is None:
        return None
    try:
        if not isinstance(raw, str) or not raw.strip():
            raise InvalidSpecifier(repr(raw))
        return SpecifierSet(raw)
    except InvalidSpecifier:
        raise InputError(
            path, key, f"{raw!r} is not a PEP 440 version range", (">=0.25,<0.30", "==0.24.*", "<0.25")
        ) from None


def expectations_for(matrix: Matrix, release: str | None = None) -> ExpectationSet:
    """The matrix's expectations, judging a run of vLLM ``release`` (see harness.releases.provenance)."""
    if matrix.expectations_path is None:
        return NO_EXPECTATIONS
    return load_expectations(matrix.expectations_path, matrix).for_release(release)


def describe_stale(expectations: ExpectationSet, cells: Sequence[Cell]) -> list[str]:
    where = expectations.path.name if expectations.path else "expectations"
    scope = " in any recorded release" if expectations.releases else ""
    return [
        f"{where}: expect[{rule.index}] ({rule.expectation.reason}) matches no cell that it decides{scope}"
        for rule in expectations.stale_rules(cells)
    ]


def describe_release(expectations: ExpectationSet) -> str | None:
    """One line when the run's release is not one the file records (its verdicts were never observed)."""
    if expectations.release_recorded:
        return None
    where = expectations.path.name if expectations.path else "expectations"
    recorded = ", ".join(str(release) for release in expectations.releases)
    ran = expectations.release if expectations.release is not None else "an unknown vLLM version"
    return f"{where} records vLLM {recorded}; this run's {ran} is judged by the rules whose range holds it"
