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

A rule that expects a fault (harness.verdict.FAULTS: wrong-backend, mismatch, loader-diff,
crash, timeout) records a bug, and must say which one (harness/findings.py)::

    [expectations]
    findings = "findings.toml"       # relative to this file

    [[expect]]
    when = { backend = "HPC_ATTN", capability = "9.0", causal = true, sink = false }
    verdict = "crash"
    finding = "hpc-attn-sinks-argument"
    reason = "..."

Where the host is the machine under test (the cpu lane: CPU_ATTN's kernels depend on the CPU's
ISA), a rule may hold for some hosts only; the lane reports its host's ISA in the run's
environment (``host_isa``) and the run is judged by the rules that hold for it::

    [[expect]]
    when = { draft_kv_cache_dtype = "fp8" }
    host_isa = ["avx2"]              # amx, avx512, avx2 (harness.contracts.machine.CpuIsa.isa)
    verdict = "crash"
    ...

A rule without ``host_isa`` holds on every host; one with it holds on none where the run's host
is unknown. The stale check judges every cell on each host the file names.

A cell decided by such a rule also learns what it would get without the finding: the last
matching rule that names no finding (or the default). That is vLLM's correct behaviour, which
the reports compare with (a finding whose cells now get it is "fixed in X?") and a repro
script asserts.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness.axes import AXIS_NAMES, AxisValue
from harness.errors import InputError
from harness.findings import Finding, FindingSet, load_findings
from harness.matrix import Cell, Matrix, Selector, read_selector
from harness.tomlfile import array_of_tables, only_keys, parse_release, read_toml, release_range
from harness.verdict import FAULTS, VERDICTS, Verdict

_RULE_KEYS = ("when", "vllm", "host_isa", "verdict", "message", "finding", "reason")
HOST_ISAS = ("amx", "avx512", "avx2", "none")


@dataclass(frozen=True)
class Expectation:
    verdict: Verdict
    reason: str
    message: str | None = None
    rule: int | None = None  # index of the rule in its file; None = the file's default
    finding: Finding | None = None  # the known bug the rule records
    # For a rule with a finding, what the cell gets without it (set by ExpectationSet.for_cell).
    correct: Expectation | None = None

    def describe(self) -> str:
        return self.reason if self.rule is None else f"rule {self.rule}: {self.reason}"


@dataclass(frozen=True)
class Rule:
    index: int
    when: Selector
    expectation: Expectation
    vllm: SpecifierSet | None = None  # the releases the rule holds for; None = every release
    host_isa: frozenset[str] | None = None  # the host ISAs the rule holds for; None = every host

    def holds_for(self, release: Version | None, host_isa: str | None = None) -> bool:
        if self.host_isa is not None and host_isa not in self.host_isa:
            return False
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
    # Each recorded release's build-path fingerprint (harness.watch.record.build_fingerprint) at the
    # run that last measured it whole: a release whose fingerprint is not today's is stale.
    measured: Mapping[Version, str] = dataclasses.field(default_factory=dict)
    release: Version | None = None  # the run's vLLM release, which picks the versioned rules
    host_isa: str | None = None  # the run's host ISA, where the lane reports one (the cpu lane)

    @property
    def host_isas(self) -> tuple[str, ...]:
        """The host ISAs some rule names: the stale check judges the cells on each."""
        return tuple(sorted({isa for rule in self.rules for isa in rule.host_isa or ()}))

    def for_host(self, host_isa: str | None) -> ExpectationSet:
        """The same rules, judging a run on a host of ``host_isa`` (None: unknown)."""
        return self if host_isa == self.host_isa else dataclasses.replace(self, host_isa=host_isa)

    def for_release(self, release: str | Version | None) -> ExpectationSet:
        """The same rules, judging a run of ``release`` (None: unknown, versioned rules hold for none)."""
        if release is not None and not isinstance(release, Version):
            release = parse_release(release)
        return dataclasses.replace(self, release=release)

    @functools.cached_property
    def _rules_in_force(self) -> _RuleIndex:
        # Built once per set, not per cell: a stale check judges every cell under every recorded release.
        return _RuleIndex.of(tuple(rule for rule in self.rules if rule.holds_for(self.release, self.host_isa)))

    def for_cell(self, cell: Cell) -> Expectation:
        index = self._rules_in_force
        matching = index.matching(cell.values)
        chosen = index.last(matching, self.default)
        # Without the finding the cell falls to the last rule recording no bug: vLLM's correct answer.
        if chosen.finding is None:
            return chosen
        return dataclasses.replace(chosen, correct=index.last(matching & index.recording_no_bug, self.default))

    @property
    def release_recorded(self) -> bool:
        """False when the file records releases and the run's is not one of them."""
        return not self.releases or self.release in self.releases

    def stale_rules(self, cells: Iterable[Cell]) -> tuple[Rule, ...]:
        cells = tuple(cells)
        judged = [self.for_release(release) for release in self.releases] if self.releases else [self]
        if self.host_isas:
            judged = [judge.for_host(isa) for judge in judged for isa in (self.host_isa, *self.host_isas)]
        used = {expectations.for_cell(cell).rule for expectations in judged for cell in cells}
        return tuple(rule for rule in self.rules if rule.index not in used)


@dataclass(frozen=True)
class _RuleIndex:
    """Rules as bit sets per axis value, so judging a cell costs a few lookups per axis, not a pass
    over every rule: the stale check and the findings judge every cell under every recorded release.

    Bit i stands for the i-th rule in force. A rule matches a cell when, for every axis it names,
    the cell has that axis with an accepted value (``selector_matches``); the last match wins."""

    rules: tuple[Rule, ...]
    naming: Mapping[str, int]  # axis -> the rules that name it
    accepting: Mapping[str, Mapping[AxisValue, int]]  # axis -> value -> the rules naming the axis that accept it
    recording_no_bug: int  # the rules that name no finding

    @classmethod
    def of(cls, rules: tuple[Rule, ...]) -> _RuleIndex:
        naming: dict[str, int] = {}
        accepting: dict[str, dict[AxisValue, int]] = {}
        no_bug = 0
        for bit, rule in enumerate(rules):
            for axis, accepted in rule.when:
                naming[axis] = naming.get(axis, 0) | 1 << bit
                by_value = accepting.setdefault(axis, {})
                for value in accepted:
                    by_value[value] = by_value.get(value, 0) | 1 << bit
            if rule.expectation.finding is None:
                no_bug |= 1 << bit
        return cls(rules, naming, accepting, no_bug)

    def matching(self, values: Mapping[str, AxisValue]) -> int:
        matched = (1 << len(self.rules)) - 1
        for axis, naming in self.naming.items():
            # A rule naming this axis survives only if it accepts the cell's value (a cell without the axis: none do).
            accepted = self.accepting[axis].get(values[axis], 0) if axis in values else 0
            matched &= ~naming | accepted
        return matched

    def last(self, matched: int, default: Expectation) -> Expectation:
        return self.rules[matched.bit_length() - 1].expectation if matched else default


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
    only_keys(path, "expectations", head, ("default", "reason", "releases", "findings", "measured"))
    default = Expectation(
        verdict=_verdict(path, "expectations.default", head.get("default", "pass")),
        reason=str(head.get("reason", "default expectation")),
    )
    if default.verdict in FAULTS:
        raise InputError(
            path, "expectations.default", f"{default.verdict} is a fault: it cannot be what every cell should get"
        )
    releases = _releases(path, head.get("releases", []))
    measured = _measured(path, head.get("measured", {}), releases)
    findings = _findings(path, head.get("findings"))
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
        verdict = _verdict(path, f"{key}.verdict", table.get("verdict"))
        rules.append(
            Rule(
                index=index,
                when=read_selector(path, f"{key}.when", when, matrix.all_axes if matrix else None),
                expectation=Expectation(
                    verdict, reason, message, index, _rule_finding(path, key, verdict, table.get("finding"), findings)
                ),
                vllm=release_range(path, f"{key}.vllm", table["vllm"]) if "vllm" in table else None,
                host_isa=_host_isas(path, f"{key}.host_isa", table["host_isa"]) if "host_isa" in table else None,
            )
        )
    return ExpectationSet(path=path, default=default, rules=tuple(rules), releases=releases, measured=measured)


def _host_isas(path: Path, key: str, raw: object) -> frozenset[str]:
    values = [raw] if isinstance(raw, str) else raw
    if not isinstance(values, list) or not values or not all(isinstance(v, str) and v in HOST_ISAS for v in values):
        raise InputError(path, key, f"{raw!r} is not a host ISA or a list of them", HOST_ISAS)
    return frozenset(values)


def _measured(path: Path, raw: object, releases: tuple[Version, ...]) -> dict[Version, str]:
    if not isinstance(raw, dict) or not all(isinstance(v, str) and v for v in raw.values()):
        raise InputError(path, "expectations.measured", 'must be a table of "RELEASE" = "FINGERPRINT"')
    measured = {}
    for text, fingerprint in raw.items():
        try:
            release = parse_release(text)
        except ValueError as exc:
            raise InputError(path, f"expectations.measured.{text}", str(exc)) from None
        if release not in releases:
            raise InputError(path, f"expectations.measured.{text}", "is not a recorded release", map(str, releases))
        measured[release] = fingerprint
    return measured


def _findings(path: Path, raw: object) -> FindingSet | None:
    if raw is None:
        return None
    if not isinstance(raw, str) or not raw.strip():
        raise InputError(path, "expectations.findings", "must be the path of a findings file", ("findings.toml",))
    return load_findings(path.parent / raw)


def _rule_finding(path: Path, key: str, verdict: Verdict, raw: object, findings: FindingSet | None) -> Finding | None:
    """The finding a rule names. A rule expecting a fault must name one: recorded without it, a new
    bug would be an expected verdict like any refusal by design, and the run green."""
    if raw is None:
        if verdict not in FAULTS:
            return None
        raise InputError(
            path,
            f"{key}.finding",
            f'verdict {verdict} records a fault: name the finding it is (finding = "ID", '
            "from the findings file expectations.findings names; add one there for a new bug)",
            findings.ids if findings else None,
        )
    if findings is None:
        raise InputError(path, f"{key}.finding", "names a finding, but expectations.findings names no findings file")
    if not isinstance(raw, str) or raw not in findings.findings:
        raise InputError(path, f"{key}.finding", f"{raw!r} is not a finding of {findings.path.name}", findings.ids)
    return findings.findings[raw]


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


def build_fingerprint(package: Path, build_path: Sequence[str], files: Sequence[Path] = ()) -> str:
    """What a lane's verdicts are built from, as one short digest: every file the contract's
    ``build_path`` globs name under the harness ``package`` (paths and contents), and ``files`` (the
    matrix) by name and contents. A recorded release measured under another fingerprint is stale
    until it is measured again."""
    digest = hashlib.sha256()
    found = sorted({path for pattern in build_path for path in package.glob(pattern) if path.is_file()})
    named = [(path.relative_to(package).as_posix(), path) for path in found] + [(path.name, path) for path in files]
    for name, path in named:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def lane_fingerprint(matrix: Matrix) -> str:
    """``build_fingerprint`` of the matrix's lane, as this checkout (or install) has it: a lane run
    records it in its run header, and ``expectations measured`` marks a release measured only by a
    report whose run has today's."""
    return build_fingerprint(Path(__file__).resolve().parent, matrix.contract.build_path, (matrix.path,))
