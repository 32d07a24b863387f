"""Reading JUnit inputs of a merge: testcases grouped by run, one copy each, conflicts named.

Each input testsuite belongs to the run its properties describe (lane, device,
vLLM/torch versions). Suites of one run (xdist workers, re-uploaded shards) become
one group; suites of different runs stay apart. A testcase seen twice in one run
with the same status collapses; with different results the worse one is kept and the
conflict listed; a copy skipped as not run gives way to a copy that ran. The merged
junit.xml is rendered from cell records where a run has them (junit.py); these
testcases are written back only for runs that JUnit files alone describe.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from junitparser import Error, Failure, Skipped, TestCase

from harness.reports.inputs import JUnitInput
from harness.reports.model import ForeignSuite, JUnitConflict, Run, run_from_meta

# Which copy of a testcase is kept: a result beats "skipped" (a shard that never reached
# the cell, while another ran it), and among results the worse one wins.
STATUS_ORDER = ("skipped", "passed", "failure", "error")


def status(case: TestCase) -> str:
    # child() finds one element; TestCase.result wraps every child, several times slower at 100k
    # cases (benchmarks/README.md, "Figures behind the code").
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
class _RunCases:
    run: Run
    name: str
    timestamp: str | None
    properties: list[tuple[str, str]]
    cases: dict[tuple[str, str], _Seen]


def merge_junit(inputs: Sequence[JUnitInput]) -> tuple[list[tuple[Run, ForeignSuite]], list[JUnitConflict]]:
    """The runs the JUnit files describe, each with its testcases, and the conflicts between copies."""
    groups: dict[str, _RunCases] = {}
    for part in inputs:
        for suite in part.xml:
            properties = [(prop.name, prop.value) for prop in suite.properties()]
            run = run_from_meta(dict(properties))
            group = groups.setdefault(run.key, _RunCases(run, suite.name or run.key, suite.timestamp, properties, {}))
            for case in suite:
                ident = (case.classname or "", case.name or "")
                now = status(case)
                seen = group.cases.get(ident)
                if seen is None:
                    group.cases[ident] = _Seen(case, now, [(now, part.source)])
                    continue
                seen.history.append((now, part.source))
                if STATUS_ORDER.index(now) > STATUS_ORDER.index(seen.status):
                    seen.case, seen.status = case, now
    conflicts = [
        JUnitConflict(
            run=key,
            classname=classname,
            name=name,
            statuses=tuple(state for state, _ in seen.history),
            sources=tuple(source for _, source in seen.history),
            kept=seen.status,
        )
        for key, group in groups.items()
        for (classname, name), seen in group.cases.items()
        if len({state for state, _ in seen.history if state != "skipped"}) > 1
    ]
    runs = [
        (
            group.run,
            ForeignSuite(
                group.name,
                group.timestamp,
                tuple(group.properties),
                tuple(seen.case for seen in group.cases.values()),
            ),
        )
        for group in groups.values()
    ]
    return runs, conflicts
