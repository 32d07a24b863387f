"""The one report model: runs, the cells each ran, and what is missing or disputed.

A single run is the merge of one journal: ``dflash-matrix report``, the pytest plugin and
``dflash-matrix merge`` all build a ``Report`` and hand it to the same renderers (junit.xml,
matrix.json, matrix.md, matrix.html), so one run and many read the same everywhere. Types
live here, below every renderer and reader; nothing here imports a renderer.

A run is one lane on one platform and device with one vLLM and torch build. The same cell
in two runs is two rows and never overwrites; see merge.py for one run reported twice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from harness.errors import InputError
from harness.findings import Finding
from harness.journal import JournalContents
from harness.reports.loader_differential import DifferentialSummary, summarize
from harness.result import CellResult
from harness.verdict import VERDICT_ORDER, ClaimGap, Outcome

# dflash-matrix/2: one shape for one run or many (see README, "Reports"). /1 is still read.
SCHEMA = "dflash-matrix/2"
READABLE_SCHEMAS = ("dflash-matrix/1", SCHEMA)

# The run fields the matrix.json contract names, and where lanes and the plugin may put them.
RUN_FIELDS = ("lane", "platform", "device", "vllm_version", "torch_version", "started_at", "ended_at")
_ALIASES: Mapping[str, tuple[str, ...]] = {
    "vllm_version": ("vllm",),
    "torch_version": ("torch",),
    "started_at": ("started",),
    "ended_at": ("ended",),
}
# The run metadata that tells two runs apart. Start/end times are left out on purpose:
# xdist workers and resumed runs of one job start at different times but are one run.
RUN_KEY_FIELDS = ("lane", "platform", "device", "vllm_version", "torch_version")
# Run metadata shown elsewhere, or bookkeeping of one writer (an xdist worker) rather than of the run.
_NOT_ENVIRONMENT = ("stale_expectations", "resumed", "worker")


@dataclass(frozen=True)
class Run:
    """One lane run on one machine with one vLLM/torch build: a column family of the matrix."""

    lane: str
    platform: str
    device: str
    vllm_version: str
    torch_version: str
    meta: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def key(self) -> str:
        return " / ".join(
            (self.lane, self.platform, self.device, f"vllm {self.vllm_version}", f"torch {self.torch_version}")
        )

    @property
    def slot(self) -> str:
        """The same machine and lane, whatever the versions: what a nightly diff pairs up."""
        return " / ".join((self.lane, self.platform, self.device))

    @property
    def capability(self) -> str | None:
        """The compute capability the run's device reports (gpu lane), as ``sm90``."""
        value = self.meta.get("capability")
        return "sm" + str(value).replace(".", "") if value not in (None, "") else None

    @property
    def label(self) -> str:
        """``NVIDIA H100 sm90 · vLLM 0.33.0``: what a person calls this run."""
        device = " ".join(part for part in (self.device, self.capability) if part)
        return f"{device} · vLLM {self.vllm_version}"


def run_from_meta(meta: Mapping[str, Any]) -> Run:
    def pick(name: str) -> str:
        for key in (name, *_ALIASES.get(name, ())):
            value = meta.get(key)
            if value not in (None, ""):
                return str(value)
        return "unknown"

    return Run(**{name: pick(name) for name in RUN_KEY_FIELDS}, meta=dict(meta))


@dataclass(frozen=True)
class RunResults:
    """One run's cells as one input (a journal, a matrix.json) reported them."""

    source: str
    run: Run
    cells: tuple[CellResult, ...]
    not_run: tuple[str, ...] = ()
    stale_expectations: tuple[Any, ...] = ()
    finished: bool = True  # False: the journal shows the run was killed or timed out before its end


def results_from_journal(contents: JournalContents) -> RunResults:
    """The journals of one run (its xdist workers, a resumed run) as one input."""
    where = ", ".join(str(path) for path in contents.files) or "journal"
    lanes = sorted({str(run["lane"]) for run in contents.runs} | {cell.lane for cell in contents.cells})
    if not lanes:
        raise InputError(where, "", "no run or cell record: nothing to report")
    if len(lanes) > 1:
        raise InputError(
            where, "", f"journals of several lanes ({', '.join(lanes)}): report each lane, then merge the reports"
        )
    return RunResults(
        source=where,
        run=run_from_meta(_run_metadata(contents, lanes[0])),
        cells=_in_plan_order(contents),
        not_run=tuple(contents.not_run),
        stale_expectations=_stale(contents),
        finished=contents.ended,
    )


def _run_metadata(contents: JournalContents, lane: str) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for run in contents.runs:  # later records win: a resumed run describes the machine now
        merged.update(run)
    merged.update(contents.env)
    scalars = {
        key: value
        for key, value in merged.items()
        if isinstance(key, str) and key not in _NOT_ENVIRONMENT and isinstance(value, str | int | float | bool)
    }
    fields: dict[str, Any] = {name: _pick(scalars, name) for name in RUN_FIELDS}
    fields["lane"] = lane
    fields["started_at"] = contents.started_at or fields["started_at"]
    fields["ended_at"] = (contents.ended_at or fields["ended_at"]) if contents.ended else None
    aliases = {alias for names in _ALIASES.values() for alias in names}
    rest = {key: scalars[key] for key in sorted(scalars) if key not in fields and key not in aliases}
    return {**fields, **rest}


def _pick(values: Mapping[str, Any], name: str) -> Any:
    for key in (name, *_ALIASES.get(name, ())):
        if values.get(key) not in (None, ""):
            return values[key]
    return None


def _in_plan_order(contents: JournalContents) -> tuple[CellResult, ...]:
    position = {ident: index for index, ident in enumerate(dict.fromkeys(contents.planned))}
    return tuple(sorted(contents.cells, key=lambda cell: (position.get(cell.id, len(position)), cell.id)))


def _stale(contents: JournalContents) -> tuple[str, ...]:
    # Every writer of one run computes the same list; the latest run's is the current truth.
    for run in reversed(contents.runs):
        if "stale_expectations" in run:
            return tuple(run["stale_expectations"])
    return ()


@dataclass(frozen=True)
class Conflict:
    """One cell of one run reported with different verdicts by different inputs."""

    run: str
    cell_id: str
    verdicts: tuple[str, ...]  # each input's verdict, in input order
    sources: tuple[str, ...]
    kept: str

    def describe(self) -> str:
        pairs = zip(self.verdicts, self.sources, strict=True)
        reported = ", ".join(f"{verdict} ({source})" for verdict, source in pairs)
        return f"inputs disagree: {reported}; the worse, {self.kept}, is kept"


@dataclass(frozen=True)
class JUnitConflict:
    """One testcase of one run with different statuses in different JUnit inputs."""

    run: str
    classname: str
    name: str
    statuses: tuple[str, ...]
    sources: tuple[str, ...]
    kept: str


@dataclass(frozen=True)
class ForeignSuite:
    """A run known only from JUnit input (no journal, no matrix.json): its testcases as read,
    one copy per (classname, name), written back unchanged."""

    name: str
    timestamp: str | None
    properties: tuple[tuple[str, str], ...]
    cases: tuple[Any, ...]  # junitparser TestCase elements


@dataclass(frozen=True)
class CellRun:
    """A cell as it ran in one run."""

    run: str
    cell: CellResult
    conflict: Conflict | None = None


@dataclass(frozen=True)
class FindingInRun:
    """A finding (harness.findings) as one run shows it: the run's cells its rules decide, and which
    of them now get what they would without it (the finding fixed upstream in that release?)."""

    run: Run
    finding: Finding
    cells: tuple[str, ...]
    fixed: tuple[str, ...]
    # Where the views list the finding's cells (an HTML id, a Markdown heading): the finding's id, and
    # for its n-th other run "<id>-<n>", as GitHub names repeated headings.
    anchor: str

    @property
    def status(self) -> str:
        if not self.fixed:
            return f"present in vLLM {self.run.vllm_version}"
        if len(self.fixed) == len(self.cells):
            return f"fixed in {self.run.vllm_version}?"
        return f"fixed in {self.run.vllm_version}? ({len(self.fixed)} of {len(self.cells)} cells)"

    @property
    def stale(self) -> str | None:
        """A finding every cell of which behaves as without it: its rules, like a rule deciding no cell, are stale."""
        if not self.fixed or len(self.fixed) < len(self.cells):
            return None
        return (
            f"finding {self.finding.id}: fixed in {self.run.vllm_version}? its {len(self.cells)} cells get what "
            "they would without it: the rules naming it are stale"
        )


def finding_line(cell: CellResult) -> str | None:
    """What a cell's own output says of its finding: which, what kind, upstream, and the verdict without it."""
    if cell.finding is None or cell.correct is None:
        return None
    finding = cell.finding
    fixed = " (this cell gets that now: fixed?)" if cell.fixed else ""
    return (
        f"finding {finding.id} ({finding.kind.value}, upstream: {finding.upstream_status}, since vLLM "
        f"{finding.since()}): {finding.title}; without it: {cell.correct.verdict.value}{fixed}"
    )


@dataclass(frozen=True)
class Report:
    runs: tuple[Run, ...]
    rows: tuple[CellRun, ...]
    not_run: tuple[tuple[str, str], ...]  # (run key, cell id)
    stale: Mapping[str, tuple[Any, ...]]  # run key -> expectation rules that decide no cell
    unfinished: frozenset[str]  # keys of runs killed or timed out before their end
    conflicts: tuple[Conflict, ...] = ()
    junit_conflicts: tuple[JUnitConflict, ...] = ()
    sources: tuple[str, ...] = ()
    junit_only: Mapping[str, ForeignSuite] = field(default_factory=dict)

    def run_by_key(self) -> dict[str, Run]:
        return {run.key: run for run in self.runs}

    def rows_of(self, key: str) -> list[CellRun]:
        return self._rows_by_run.get(key, [])

    def not_run_of(self, key: str) -> list[str]:
        return self._not_run_by_run.get(key, [])

    def incomplete(self, key: str) -> bool:
        """Killed, timed out, or finished without a result for every planned cell."""
        return key in self.unfinished or bool(self.not_run_of(key))

    def state(self, key: str) -> str:
        """How a run ended, in words every view shows."""
        if key in self.junit_only:
            return "JUnit only"
        if key in self.unfinished:
            return "killed or timed out"
        if self.not_run_of(key):
            return f"{len(self.not_run_of(key))} cells not run"
        return "finished"

    def stale_of(self, key: str) -> tuple[Any, ...]:
        """The run's stale rules: those its journal names (deciding no cell), then those of fixed findings."""
        fixed = tuple(line for item in self.findings if item.run.key == key and (line := item.stale) is not None)
        return tuple(self.stale.get(key, ())) + fixed

    @property
    def stale_expectations(self) -> tuple[Any, ...]:
        distinct: dict[str, Any] = {}
        fixed = tuple(line for item in self.findings if (line := item.stale) is not None)
        for items in (*self.stale.values(), fixed):
            for item in items:
                distinct.setdefault(repr(item), item)
        return tuple(distinct.values())

    @cached_property
    def findings(self) -> tuple[FindingInRun, ...]:
        """Every finding some cell's expectation records, per run, in run order and then by finding id."""
        groups: dict[tuple[str, str], tuple[Finding, list[CellResult]]] = {}
        for row in self.rows:
            if row.cell.finding is not None:
                groups.setdefault((row.run, row.cell.finding.id), (row.cell.finding, []))[1].append(row.cell)
        runs = self.run_by_key()
        order = {run.key: index for index, run in enumerate(self.runs)}
        seen: Counter[str] = Counter()
        found: list[FindingInRun] = []
        for (key, ident), (finding, cells) in sorted(
            groups.items(), key=lambda item: (order.get(item[0][0], 0), item[0][1])
        ):
            if key not in runs:
                continue
            anchor = ident if not seen[ident] else f"{ident}-{seen[ident]}"
            seen[ident] += 1
            fixed = tuple(cell.id for cell in cells if cell.fixed)
            found.append(FindingInRun(runs[key], finding, tuple(cell.id for cell in cells), fixed, anchor))
        return tuple(found)

    def claim_gaps(self, gap: ClaimGap) -> list[CellRun]:
        return [row for row in self.rows if row.cell.claim_gap == gap]

    @property
    def mismatching(self) -> list[CellRun]:
        return [row for row in self.rows if row.cell.outcome != Outcome.MATCH]

    def summary(self) -> dict[str, Any]:
        return dict(self._summary)

    @cached_property
    def loader_differential(self) -> DifferentialSummary:
        return summarize(row.cell for row in self.rows)

    @cached_property
    def _rows_by_run(self) -> dict[str, list[CellRun]]:
        grouped: dict[str, list[CellRun]] = {}
        for row in self.rows:
            grouped.setdefault(row.run, []).append(row)
        return grouped

    @cached_property
    def _not_run_by_run(self) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = {}
        for key, ident in self.not_run:
            grouped.setdefault(key, []).append(ident)
        return grouped

    @cached_property
    def _summary(self) -> dict[str, Any]:
        # Counted once: every renderer shows it, and 100k cells make a recount noticeable.
        verdicts = Counter(row.cell.verdict for row in self.rows)
        outcomes = Counter(row.cell.outcome for row in self.rows)
        gaps = Counter(row.cell.claim_gap for row in self.rows)
        mismatching = len(self.rows) - outcomes[Outcome.MATCH]
        conflicts = len(self.conflicts) + len(self.junit_conflicts)
        incomplete = [run.key for run in self.runs if self.incomplete(run.key)]
        stale = len(self.stale_expectations)
        findings = {item.finding.id for item in self.findings}
        fixed = {item.finding.id for item in self.findings if item.stale is not None}
        return {
            "runs": len(self.runs),
            "cells": len(self.rows),
            "not_run": len(self.not_run),
            "match": outcomes[Outcome.MATCH],
            "mismatching": mismatching,
            "verdicts": {verdict.value: verdicts[verdict] for verdict in VERDICT_ORDER},
            "outcomes": {how.value: outcomes[how] for how in Outcome},
            "over_claims": gaps[ClaimGap.OVER_CLAIM],
            "under_claims": gaps[ClaimGap.UNDER_CLAIM],
            "stale_expectations": stale,
            "findings": len(findings),
            "findings_fixed": len(fixed),
            "unrecorded_faults": sum(1 for row in self.rows if row.cell.unrecorded_fault),
            # Cells whose host could not answer what vLLM asked: counted apart, no answer of vLLM's.
            "host_limited": sum(1 for row in self.rows if row.cell.host_limited),
            "conflicts": conflicts,
            "incomplete_runs": len(incomplete),
            "junit_only_runs": sorted(self.junit_only),
            "loader_differential": self.loader_differential.to_json(),
            # What a CI gate wants in one bit: every planned cell of every run ran to the end of
            # its run, got its expected verdict, once, and every expectation rule decided a cell.
            "ok": mismatching == 0 and not incomplete and not stale and not conflicts,
        }


# The testsuite name every view gives a run: JUnit's suites, matrix.json's runs.
SUITE_PREFIX = "dflash-matrix"


def suite_names(report: Report) -> dict[str, str]:
    """A unique, readable testsuite name per run: ``dflash-matrix.<lane> [<device> <sm> · vLLM <x.y.z>]``.

    Runs a label does not tell apart (same device and vLLM, another platform or torch) get
    those added; names that would still collide are refused, never written twice."""
    levels = (
        lambda run: run.label,
        lambda run: f"{run.label} · torch {run.torch_version}",
        lambda run: f"{run.label} · {run.platform} · torch {run.torch_version}",
    )
    names: dict[str, str] = {}
    for run in report.runs:
        for level in levels:
            name = f"{SUITE_PREFIX}.{run.lane} [{level(run)}]"
            if sum(1 for other in report.runs if f"{SUITE_PREFIX}.{other.lane} [{level(other)}]" == name) == 1:
                break
        if run.key in report.junit_only and run.lane == "unknown":
            # A JUnit file that names no dflash-matrix run keeps its own suite name.
            name = report.junit_only[run.key].name
        names[run.key] = name
    taken: dict[str, str] = {}
    for key, name in names.items():
        if name in taken:
            raise InputError(
                "junit.xml", "testsuite", f"runs {taken[name]!r} and {key!r} would share the suite name {name!r}"
            )
        taken[name] = key
    return names


@dataclass(frozen=True)
class FindingReleases:
    """One finding across the releases of one slot's history: per release, how many of its cells
    (those some release's expectations put under it) show it, how many get what they would without
    it, and how many gave a verdict at all. A release outside the finding's recorded range counts as
    well: a cell there shows it when it gets the verdict and message it has under the finding."""

    finding: str
    slot: str
    releases: tuple[str, ...]  # oldest first; () when the history ran no release of this slot
    showing: tuple[int, ...]
    without: tuple[int, ...]  # cells that get the verdict they would without the finding
    ran: tuple[int, ...]

    @property
    def first_bad(self) -> str | None:
        return next((release for release, n in zip(self.releases, self.showing, strict=True) if n), None)

    @property
    def last_good(self) -> str | None:
        """The latest release before the first bad one in which some of its cells got what they would
        without it (none showed it: that is the first bad one's definition). None: not measured there;
        a release whose cells could not be asked (unavailable) is no good release."""
        if (first := self.first_bad) is None:
            return None
        before = self.releases.index(first)
        return next((self.releases[i] for i in reversed(range(before)) if self.without[i]), None)

    @property
    def fixed_in(self) -> str | None:
        """The first release after the last one that shows it in which its cells get what they would without it."""
        last = max((i for i, n in enumerate(self.showing) if n), default=None)
        if last is None:
            return None
        return next((self.releases[i] for i in range(last + 1, len(self.releases)) if self.without[i]), None)

    def per_release(self) -> str:
        """``0.30.0 40/40 · 0.31.0 40/40``: the cells showing it of those that gave a verdict, per release."""
        return " · ".join(
            f"{release} {showing}/{ran}"
            for release, showing, ran in zip(self.releases, self.showing, self.ran, strict=True)
        )
