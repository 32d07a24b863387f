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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.axes import AXIS_NAMES
from harness.errors import InputError
from harness.matrix import Cell, Matrix, Selector, _only_keys, _read_selector, _read_toml, _tables, selector_matches
from harness.verdict import VERDICTS, Verdict

_RULE_KEYS = ("when", "verdict", "message", "reason")


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


@dataclass(frozen=True)
class ExpectationSet:
    path: Path | None
    default: Expectation
    rules: tuple[Rule, ...] = ()

    def for_cell(self, cell: Cell) -> Expectation:
        values = cell.values
        chosen = self.default
        for rule in self.rules:
            if selector_matches(rule.when, values):
                chosen = rule.expectation
        return chosen

    def stale_rules(self, cells: Iterable[Cell]) -> tuple[Rule, ...]:
        used = {self.for_cell(cell).rule for cell in cells}
        return tuple(rule for rule in self.rules if rule.index not in used)


NO_EXPECTATIONS = ExpectationSet(
    path=None, default=Expectation(Verdict.PASS, "no expectations file: every cell should pass")
)


def _verdict(path: Path, key: str, value: object) -> Verdict:
    if not isinstance(value, str) or value not in VERDICTS:
        raise InputError(path, key, f"{value!r} is not a verdict", VERDICTS)
    return Verdict(value)


def load_expectations(path: str | Path, matrix: Matrix | None = None) -> ExpectationSet:
    path = Path(path)
    raw = _read_toml(path)
    _only_keys(path, "", raw, ("expectations", "expect"))
    head = raw.get("expectations", {})
    if not isinstance(head, dict):
        raise InputError(path, "expectations", "must be a table")
    _only_keys(path, "expectations", head, ("default", "reason"))
    default = Expectation(
        verdict=_verdict(path, "expectations.default", head.get("default", "pass")),
        reason=str(head.get("reason", "default expectation")),
    )
    rules = []
    for index, table in enumerate(_tables(path, raw, "expect")):
        key = f"expect[{index}]"
        _only_keys(path, key, table, _RULE_KEYS)
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
                when=_read_selector(path, f"{key}.when", when, matrix.axes if matrix else None),
                expectation=Expectation(_verdict(path, f"{key}.verdict", table.get("verdict")), reason, message, index),
            )
        )
    return ExpectationSet(path=path, default=default, rules=tuple(rules))


def expectations_for(matrix: Matrix) -> ExpectationSet:
    if matrix.expectations_path is None:
        return NO_EXPECTATIONS
    return load_expectations(matrix.expectations_path, matrix)


def describe_stale(expectations: ExpectationSet, cells: Sequence[Cell]) -> list[str]:
    where = expectations.path.name if expectations.path else "expectations"
    return [
        f"{where}: expect[{rule.index}] ({rule.expectation.reason}) matches no cell that it decides"
        for rule in expectations.stale_rules(cells)
    ]
