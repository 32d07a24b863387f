"""Merging JUnit files from many shards and runners with junitparser.

Each input testsuite belongs to the run its properties describe (lane, device,
vLLM/torch versions). Suites of one run (xdist workers, re-uploaded shards) become
one suite; suites of different runs stay apart, so a cell tested on two GPUs is two
testcases in two suites. A testcase seen twice in one run with the same status
collapses; with different statuses the worse one is kept and the conflict listed.
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

# Worse statuses sort later.
_STATUS_ORDER = ("passed", "skipped", "failure", "error")


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
    kinds = {type(result) for result in case.result}
    if Error in kinds:
        return "error"
    if Failure in kinds:
        return "failure"
    if Skipped in kinds:
        return "skipped"
    return "passed"


@dataclass
class _RunSuite:
    run: Run
    name: str
    properties: list[tuple[str, str]]
    cases: dict[tuple[str, str], tuple[TestCase, str, list[tuple[str, str]]]]


def merge_junit(
    inputs: Sequence[JUnitInput], rows: Sequence[Row], runs: Sequence[Run], not_run: Sequence[tuple[str, str]]
) -> tuple[JUnitXml, list[tuple[Run, int]], list[JUnitConflict]]:
    """The merged JUnit, the runs the JUnit files describe (with testcase counts), and the conflicts."""
    suites: dict[str, _RunSuite] = {}
    for part in inputs:
        for suite in _suites(part.xml):
            properties = [(prop.name, prop.value) for prop in suite.properties()]
            run = run_from_meta(dict(properties))
            group = suites.setdefault(run.key, _RunSuite(run, suite.name or run.key, properties, {}))
            for case in suite:
                ident = (case.classname or "", case.name or "")
                seen = group.cases.get(ident)
                if seen is None:
                    group.cases[ident] = (case, status(case), [(status(case), part.source)])
                    continue
                _, kept_status, history = seen
                new_status = status(case)
                history.append((new_status, part.source))
                if _STATUS_ORDER.index(new_status) > _STATUS_ORDER.index(kept_status):
                    group.cases[ident] = (case, new_status, history)
    merged = JUnitXml(name="dflash-matrix")
    conflicts: list[JUnitConflict] = []
    for key, group in suites.items():
        out = TestSuite(group.name)
        for name, value in group.properties:
            out.add_property(name, value)
        cases = []
        for (classname, name), (case, kept_status, history) in group.cases.items():
            if len({s for s, _ in history}) > 1:
                conflicts.append(
                    JUnitConflict(
                        run=key,
                        classname=classname,
                        name=name,
                        statuses=tuple(s for s, _ in history),
                        sources=tuple(source for _, source in history),
                        kept=kept_status,
                    )
                )
            cases.append(case)
        out.add_testcases(cases)
        merged.add_testsuite(out)
    by_run: dict[str, list[Row]] = {}
    for row in rows:
        by_run.setdefault(row.run, []).append(row)
    missing: dict[str, list[str]] = {}
    for run_key, cell_id in not_run:
        missing.setdefault(run_key, []).append(cell_id)
    for run in runs:
        if run.key not in suites:
            merged.add_testsuite(suite_from_rows(run, by_run.get(run.key, []), missing.get(run.key, [])))
    merged.update_statistics()
    return merged, [(group.run, len(group.cases)) for group in suites.values()], conflicts


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
