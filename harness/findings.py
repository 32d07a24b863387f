"""Findings: every upstream bug (and harness limit) the matrix knows, as data.

    [findings]
    rules_in = ["selection.toml"]    # the expectation files (beside this one) whose rules name these

    [[finding]]
    id = "pr-46770-v2-loader-drops-backend"
    title = "Model Runner V2's load_dflash_model drops speculative_config.attention_backend"
    kind = "upstream-bug"
    upstream = "PR #46770"          # "PR #N", "issue #N" or "unreported"; none for a harness limitation
    vllm = "<0.25"                  # the releases where it holds (PEP 440, as expectation rules)
    first_release = "0.24.0"        # the earliest release measured with it ...
    measured = "selection lane ..." # ... and where that was measured
    fixed_in = "0.25.0"             # optional: the first release measured without it
    last_good = "0.23.0"            # optional: the last release before first_release measured without it

An expectation rule records a finding with ``finding = "ID"``: once a bug is an expected verdict the
run is green, and without the finding nothing would tell "vLLM has a bug here nobody reported" from
"this backend has no sinks by design". So a rule expecting a fault verdict (harness.verdict.FAULTS)
must name one (harness/expectations.py), and a finding no rule names is stale: refused here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness.errors import InputError
from harness.tomlfile import array_of_tables, only_keys, read_toml, release, release_range
from harness.verdict import Verdict


class FindingKind(StrEnum):
    # vLLM does the wrong thing with a request it accepts (the request never reaches the draft's
    # layers, a model it lists is not registered, a setting is dropped): a bug to hand upstream.
    UPSTREAM_BUG = "upstream-bug"
    # vLLM's platform or backend says it serves the request (the selector accepts it) and then
    # cannot: a crash at build or wrong numbers where a clean refusal would tell the user what to do.
    OVER_CLAIM = "over-claim"
    # What this harness cannot observe on its host (no GPU driver behind the simulated platform):
    # not vLLM's to fix, kept as a finding so its failing verdict neither reads as a bug nor hides one.
    HARNESS_LIMITATION = "harness-limitation"
    # No kind for under-claims or refusals by design: each cell's claim gap is reported from its
    # claim already, and a refusal is an `unsupported` verdict, which needs no finding.


KINDS: tuple[str, ...] = tuple(kind.value for kind in FindingKind)
UNREPORTED = "unreported"
_UPSTREAM = re.compile(r"(PR|issue) #([1-9][0-9]*)")
_UPSTREAM_PAGES = {"PR": "pull", "issue": "issues"}
_ID = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_FINDING_KEYS = ("id", "title", "kind", "upstream", "vllm", "first_release", "measured", "fixed_in", "last_good")


@dataclass(frozen=True)
class Finding:
    id: str
    title: str
    kind: FindingKind
    vllm: SpecifierSet  # the releases where it holds
    first_release: Version  # the earliest release measured with it
    measured: str  # where first_release was measured (lane, run, date)
    upstream: str | None  # "PR #N", "issue #N" or "unreported"; None for a harness limitation
    fixed_in: Version | None = None  # the first release measured without it
    last_good: Version | None = None  # the last release before first_release measured without it

    @property
    def upstream_status(self) -> str:
        if self.upstream is None:
            return "not upstream's (harness limitation)"
        return self.upstream

    @property
    def upstream_url(self) -> str | None:
        found = _UPSTREAM.fullmatch(self.upstream or "")
        if found is None:
            return None
        return f"https://github.com/vllm-project/vllm/{_UPSTREAM_PAGES[found.group(1)]}/{found.group(2)}"

    def correct_verdicts(self, correct: Verdict) -> frozenset[Verdict]:
        """What a cell of this finding gets once it is fixed: the verdict of the rule it falls to without
        the finding (``correct``); an over-claim is fixed as well by honouring the claim (the cell passes)."""
        return frozenset({correct, Verdict.PASS} if self.kind == FindingKind.OVER_CLAIM else {correct})

    def since(self) -> str:
        """``0.26.0 (last good 0.25.1; fixed in 0.28.0)``: where the finding starts and ends."""
        extra = [f"last good {self.last_good}"] if self.last_good else []
        extra += [f"fixed in {self.fixed_in}"] if self.fixed_in else []
        return f"{self.first_release}" + (f" ({'; '.join(extra)})" if extra else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "title": self.title,
            "kind": self.kind.value,
            "upstream": self.upstream,
            "vllm": str(self.vllm),
            "first_release": str(self.first_release),
            "measured": self.measured,
            "fixed_in": str(self.fixed_in) if self.fixed_in else None,
            "last_good": str(self.last_good) if self.last_good else None,
        }

    @classmethod
    def from_json(cls, data: object, where: str = "finding") -> Finding:
        """A finding as a journal or matrix.json carries it; InputError names ``where``."""
        if not isinstance(data, dict):
            raise InputError(where, "", "a finding must be an object")
        return _finding(Path(where), "", {key: value for key, value in data.items() if value is not None})


@dataclass(frozen=True)
class FindingSet:
    path: Path
    findings: Mapping[str, Finding]

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(self.findings)


def finding_change(before: str | None, after: str | None) -> str | None:
    """What a change between two releases does to a cell's finding (by id), in words; None: nothing."""
    if before == after:
        return None
    said = [f"ends finding {before}"] if before else []
    return ", ".join([*said, f"starts finding {after}"] if after else said)


def load_findings(path: str | Path) -> FindingSet:
    """The findings file; every finding must be named by a rule of the files in ``findings.rules_in``."""
    path = Path(path)
    raw = read_toml(path)
    only_keys(path, "", raw, ("findings", "finding"))
    head = raw.get("findings", {})
    if not isinstance(head, dict):
        raise InputError(path, "findings", "must be a table")
    only_keys(path, "findings", head, ("rules_in",))
    rules_in = head.get("rules_in")
    if not isinstance(rules_in, list) or not rules_in or not all(isinstance(item, str) for item in rules_in):
        raise InputError(
            path,
            "findings.rules_in",
            "must list the expectation files whose rules name these findings",
            ('["expectations/selection.toml"]',),
        )
    findings: dict[str, Finding] = {}
    for index, table in enumerate(array_of_tables(path, raw, "finding")):
        finding = _finding(path, f"finding[{index}]", table)
        if finding.id in findings:
            raise InputError(path, f"finding[{index}].id", f"{finding.id!r} is defined twice")
        findings[finding.id] = finding
    named = _check_rules(path, [path.parent / item for item in rules_in], findings)
    for index, ident in enumerate(findings):
        if ident not in named:
            raise InputError(
                path,
                f"finding[{index}]",
                f"no rule of {', '.join(rules_in)} names {ident!r}: a finding no rule uses is stale "
                "(name it in the rule that records it, or delete it)",
            )
    return FindingSet(path, findings)


def _finding(path: Path, key: str, table: dict[str, Any]) -> Finding:
    at = (lambda name: f"{key}.{name}") if key else (lambda name: name)
    only_keys(path, key, table, _FINDING_KEYS)
    ident = table.get("id")
    if not isinstance(ident, str) or not _ID.fullmatch(ident):
        raise InputError(path, at("id"), f"{ident!r} is not a finding id (lower-case words joined by '-')")
    for name in ("title", "measured"):
        if not isinstance(table.get(name), str) or not table[name].strip():
            raise InputError(path, at(name), "must be a non-empty string")
    kind_text = table.get("kind")
    if kind_text not in KINDS:
        raise InputError(path, at("kind"), f"{kind_text!r} is not a finding kind", KINDS)
    kind = FindingKind(kind_text)
    upstream = table.get("upstream")
    if kind == FindingKind.HARNESS_LIMITATION:
        if upstream is not None:
            raise InputError(path, at("upstream"), "a harness limitation has nothing upstream to report")
    elif not isinstance(upstream, str) or not (upstream == UNREPORTED or _UPSTREAM.fullmatch(upstream)):
        raise InputError(
            path,
            at("upstream"),
            f"{upstream!r} is not an upstream reference",
            (
                "PR #46770",
                "issue #12345",
                UNREPORTED,
            ),
        )
    if "vllm" not in table:
        raise InputError(path, at("vllm"), "missing: the releases where the finding holds")
    vllm = release_range(path, at("vllm"), table["vllm"])
    first = release(path, at("first_release"), table.get("first_release"))
    fixed_in = release(path, at("fixed_in"), table["fixed_in"]) if "fixed_in" in table else None
    last_good = release(path, at("last_good"), table["last_good"]) if "last_good" in table else None
    if not vllm.contains(first, prereleases=True):
        raise InputError(path, at("first_release"), f"{first} is outside the finding's range {vllm}")
    for name, other, later in (("fixed_in", fixed_in, True), ("last_good", last_good, False)):
        if other is None:
            continue
        if vllm.contains(other, prereleases=True):
            raise InputError(path, at(name), f"{other} is inside the finding's range {vllm}: it is not without it")
        if (other > first) != later:
            raise InputError(path, at(name), f"{other} must come {'after' if later else 'before'} {first}")
    return Finding(
        id=ident,
        title=table["title"].strip(),
        kind=kind,
        vllm=vllm,
        first_release=first,
        measured=table["measured"].strip(),
        upstream=upstream,
        fixed_in=fixed_in,
        last_good=last_good,
    )


def _check_rules(path: Path, files: list[Path], findings: Mapping[str, Finding]) -> set[str]:
    """The finding ids the rules of ``files`` name; a name that is no finding is refused at its rule
    (before the findings it leaves unused are: a typo is the likelier mistake)."""
    named: set[str] = set()
    for file in files:
        if not file.is_file():
            raise InputError(path, "findings.rules_in", f"{file} is not a file")
        for index, rule in enumerate(read_toml(file).get("expect", [])):
            ident = rule.get("finding") if isinstance(rule, dict) else None
            if ident is None:
                continue
            if not isinstance(ident, str) or ident not in findings:
                raise InputError(
                    file, f"expect[{index}].finding", f"{ident!r} is not a finding of {path.name}", tuple(findings)
                )
            named.add(ident)
    return named
