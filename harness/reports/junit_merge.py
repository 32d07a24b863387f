"""Merging JUnit files from many shards and runners with junitparser.

Each input testsuite belongs to the run its properties describe (lane, device,
vLLM/torch versions). Suites of one run (xdist workers, re-uploaded shards) become
one suite; suites of different runs stay apart, so a cell tested on two GPUs is two
testcases in two suites. A testcase seen twice in one run with the same status
collapses; with different results the worse one is kept and the conflict listed; a
copy skipped as not run gives way to a copy that ran, as in the cell records.
Runs known only from journals or matrix.json get a suite built from their cells,
so the merged junit.xml covers every run the merged matrix shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from harness.reports.inputs import JUnitInput, Run, run_from_meta
from harness.reports.junit import junit_document
from harness.reports.model import RunReport

if TYPE_CHECKING:
    from harness.reports.merge import Row

# Which copy of a testcase is kept: a result beats "skipped" (a shard that never reached
# the cell, while another ran it), and among results the worse one wins.
_STATUS_ORDER = ("skipped", "passed", "failure", "error")


@dataclass(frozen=True)
class JUnitConflict:
    run: str
    classname: str
    name: str
    statuses: tuple[str, ...]
    sources: tuple[str, ...]
    kept: str

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "id": self.name,
            "classname": self.classname,
            "junit_statuses": list(self.statuses),
            "sources": list(self.sources),
            "kept": self.kept,
        }


def status(case: TestCase) -> str:
    # child() finds one element; TestCase.result would wrap every child, 4x slower on 100k cases.
    if case.child(Error) is not None:
        return "error"
    if case.child(Failure) is not None:
        return "failure"
    if case.child(Skipped) is not None:
        return "skipped"
    return "passed"


@dataclass
class _Seen:
    case: TestCase
    status: str
    history: list[tuple[str, str]]  # (status, source) of every copy, in input order


@dataclass
class _RunSuite:
    run: Run
    name: str
    timestamp: str | None
    properties: list[tuple[str, str]]
    cases: dict[tuple[str, str], _Seen]


def merge_junit(
    inputs: Sequence[JUnitInput], rows: Sequence[Row], runs: Sequence[Run], not_run: Sequence[tuple[str, str]]
) -> tuple[JUnitXml, list[tuple[Run, int]], list[JUnitConflict]]:
    """The merged JUnit, the runs the JUnit files describe (with testcase counts), and the conflicts."""
    suites: dict[str, _RunSuite] = {}
    for part in inputs:
        for suite in _suites(part.xml):
            properties = [(prop.name, prop.value) for prop in suite.properties()]
            run = run_from_meta(dict(properties))
            group = suites.setdefault(
                run.key, _RunSuite(run, suite.name or run.key, suite.timestamp, properties, {})
            )
            for case in suite:
                ident = (case.classname or "", case.name or "")
                now = status(case)
                seen = group.cases.get(ident)
                if seen is None:
                    group.cases[ident] = _Seen(case, now, [(now, part.source)])
                    continue
                seen.history.append((now, part.source))
                if _STATUS_ORDER.index(now) > _STATUS_ORDER.index(seen.status):
                    seen.case, seen.status = case, now
    merged = JUnitXml(name="dflash-matrix")
    conflicts: list[JUnitConflict] = []
    for key, group in suites.items():
        merged.add_testsuite(_suite(key, group, conflicts))
    by_run: dict[str, list[Row]] = {}
    for row in rows:
        by_run.setdefault(row.run, []).append(row)
    missing: dict[str, list[str]] = {}
    for run_key, cell_id in not_run:
        missing.setdefault(run_key, []).append(cell_id)
    for run in runs:
        if run.key not in suites:
            merged.add_testsuite(suite_from_rows(run, by_run.get(run.key, []), missing.get(run.key, [])))
    _root_statistics(merged)
    return merged, [(group.run, len(group.cases)) for group in suites.values()], conflicts


def _suite(key: str, group: _RunSuite, conflicts: list[JUnitConflict]) -> TestSuite:
    out = TestSuite(group.name)
    if group.timestamp:
        out.timestamp = group.timestamp
    for name, value in group.properties:
        out.add_property(name, value)
    counts = dict.fromkeys(_STATUS_ORDER, 0)
    elapsed = 0.0
    cases = []
    for (classname, name), seen in group.cases.items():
        if len({status for status, _ in seen.history if status != "skipped"}) > 1:
            conflicts.append(
                JUnitConflict(
                    run=key,
                    classname=classname,
                    name=name,
                    statuses=tuple(status for status, _ in seen.history),
                    sources=tuple(source for _, source in seen.history),
                    kept=seen.status,
                )
            )
        counts[seen.status] += 1
        elapsed += seen.case.time or 0.0
        cases.append(seen.case)
    # Counted here from the statuses already known: junitparser's update_statistics would
    # re-read every testcase's results, twice over for the suite and the document.
    out.extend(cases)
    out.tests = len(cases)
    out.failures, out.errors, out.skipped = counts["failure"], counts["error"], counts["skipped"]
    out.time = round(elapsed, 3)
    return out


def _root_statistics(merged: JUnitXml) -> None:
    suites = list(merged)
    merged.tests = sum(suite.tests or 0 for suite in suites)
    merged.failures = sum(suite.failures or 0 for suite in suites)
    merged.errors = sum(suite.errors or 0 for suite in suites)
    merged.skipped = sum(suite.skipped or 0 for suite in suites)
    merged.time = round(sum(suite.time or 0.0 for suite in suites), 3)


def _suites(xml: JUnitXml) -> list[TestSuite]:
    return list(xml)


def suite_from_rows(run: Run, rows: Sequence[Row], not_run: Sequence[str]) -> TestSuite:
    """A testsuite for a run known only from its cell records, written as a live run writes it."""
    report = RunReport(
        lane=run.lane,
        run=run.meta,
        cells=tuple(row.cell for row in rows),
        not_run=tuple(not_run),
        stale_expectations=tuple(str(item) for item in run.meta.get("stale_expectations") or ()),
        finished=run.meta.get("ended_at") is not None,
    )
    (suite,) = junit_document(report)
    return suite
