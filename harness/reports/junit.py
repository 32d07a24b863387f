"""junit.xml: one testsuite per run, one testcase per cell, for CI dashboards.

    <testsuites name="dflash-matrix" tests=".." failures=".." errors=".." time="..">
      <testsuite name="dflash-matrix.gpu [NVIDIA H100 sm90 · vLLM 0.33.0]" ...>  properties: the run's environment,
                                                                              and a finding:ID per finding it shows
        <testcase name="FLASH_ATTN-causal-sink-bf16" classname="gpu [NVIDIA H100 sm90 · vLLM 0.33.0].FLASH_ATTN">
          <system-out>unsupported as expected - FA2 has no sinks ...</system-out></testcase>
        <testcase ...><error type="regression" message="expected pass, observed wrong-backend: ..."/>...
        <testcase ...><failure type="unexpected-pass" message="expected unsupported, observed pass: ..."/>...
        <testcase ...><skipped message="not run: ..."/></testcase>   (a finding's cell: its system-out names it)
        <testcase name="run::incomplete" ...><error type="incomplete-run" .../></testcase>
        <testcase name="expectations::stale" ...><failure type="stale-expectations" .../></testcase>

Why these elements (what the consumers do with them, see tests/reports/test_consumers.py):
- the run is in the suite name *and* in the classname: xunit-viewer keys tests by suite name and
  name+classname, EnricoMi's publish action by (classname, name) only, junit2html's matrix by
  classname and name; with the run in both, no consumer folds one run's cell onto another's.
- a regression (worse than expected, a lost request, an unexpected crash) is an ``<error>``:
  EnricoMi makes ``<failure>`` a warning annotation and only ``<error>`` a failure annotation.
  A verdict better than expected or sideways (the expectation is out of date) stays ``<failure>``.
- cells never run stay ``<skipped>`` (true of each), and the run itself fails once, in
  ``run::incomplete``: every consumer counts skipped as success, so a killed run would be green.
- times carry at most three decimals and the root has no ``skipped`` attribute: the Jenkins xunit
  plugin's junit-10.xsd allows neither more digits nor that attribute.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable, Sequence

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from harness.reports import loader_differential
from harness.reports.junit_merge import status
from harness.reports.model import SUITE_PREFIX, CellRun, ForeignSuite, Report, Run, finding_line, suite_names
from harness.result import CellResult
from harness.verdict import Outcome, Verdict

STALE_TESTCASE = "expectations::stale"
INCOMPLETE_TESTCASE = "run::incomplete"
# Not as expected in these directions, the harness says the backend got worse: red everywhere.
_RED_VERDICTS = (Verdict.CRASH, Verdict.TIMEOUT, Verdict.WRONG_BACKEND, Verdict.WRONG_SETTING)
# Characters XML 1.0 cannot carry at all; exception messages (ANSI colours, NULs) do contain them.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_NOT_IN_FILE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def xml_text(value: object) -> str:
    return _NOT_XML.sub("\ufffd", str(value))


def seconds(value: float) -> str:
    """junit-10.xsd's SUREFIRE_TIME: digits, at most three decimals, no exponent."""
    return f"{max(value, 0.0):.3f}"


def mismatch_message(cell: CellResult) -> str:
    expected = cell.expected.value
    if cell.verdict == cell.expected and cell.expected_message:
        expected += f" with a message containing {cell.expected_message!r}"
    return f"expected {expected}, observed {cell.verdict.value}: {cell.message}"


def verdict_line(cell: CellResult) -> str:
    """The first line every consumer shows for a testcase: verdict, expectation and its reason,
    backends, message. ``unsupported as expected (FA2 has no sinks) · requested FLASH_ATTN · ...``"""
    if cell.outcome == Outcome.MATCH:
        judged = f"{cell.verdict.value} as expected ({cell.expected_reason})"
    else:
        judged = f"{cell.verdict.value}, expected {cell.expected.value}: {cell.outcome.value} ({cell.expected_reason})"
    layers = ", ".join(cell.observed_backends) or "-"
    facts = [judged, f"requested {cell.requested_backend or 'auto'}", f"draft layers {layers}"]
    return " \u00b7 ".join([*facts, cell.message] if cell.message else facts)


def cell_details(cell: CellResult) -> str:
    """The facts behind a verdict, for a human reading one testcase."""
    lines = [
        "axes: " + ", ".join(f"{name}={value}" for name, value in cell.axes.items()),
        f"verdict: {cell.verdict.value}" + (f" (stage {cell.stage.value})" if cell.stage else ""),
        f"expected: {cell.expected.value} ({cell.expected_reason})",
        f"message: {cell.message}",
        f"requested backend: {cell.requested_backend or 'auto'}",
        f"platform choice: {cell.platform_choice or '-'}",
        f"draft layers: {', '.join(cell.observed_backends) or '-'}",
    ]
    if cell.max_abs_err is not None:
        lines.append(f"max abs error: {cell.max_abs_err:.3g} (tolerance {cell.tolerance})")
    if cell.claim is not None:
        claim = "supported" if cell.claim.supported else "not supported"
        lines.append(f"claim: {claim}" + (f" ({'; '.join(cell.claim.reasons)})" if cell.claim.reasons else ""))
    if cell.claim_gap is not None:
        lines.append(f"claim gap: {cell.claim_gap.value}")
    differential = loader_differential.describe(cell)
    if differential is not None:
        lines.append(f"loader differential: {differential}")
    return "\n".join(lines)


def is_red(cell: CellResult) -> bool:
    return cell.outcome == Outcome.REGRESSION or (cell.verdict != cell.expected and cell.verdict in _RED_VERDICTS)


def _backend_in_id(ident: str) -> str:
    """Not-run cells are only ids; the backend token is the one written in capitals (or auto)."""
    for token in ident.split("-"):
        if token == "auto" or (token[:1].isupper() and token.upper() == token):
            return token
    return "unknown"


def _case(name: str, classname: str, duration_s: float = 0.0) -> TestCase:
    case = TestCase(xml_text(name), xml_text(classname))
    case._elem.set("time", seconds(duration_s))
    return case


def _cell_testcase(group: str, row: CellRun) -> TestCase:
    cell = row.cell
    case = _case(cell.id, f"{group}.{cell.axes.get('backend', 'unknown')}", cell.duration_s)
    out = [verdict_line(cell)]
    found = finding_line(cell)
    if found is not None:
        out.append(found)
    if row.conflict is not None:
        out.append("conflict: " + row.conflict.describe())
    if cell.host_limited:
        # Neither green nor red for vLLM: the host could not answer what vLLM asked.
        case.result = [Skipped(xml_text(cell.message))]
        out.append(cell_details(cell))
    elif cell.outcome != Outcome.MATCH:
        kind = Error if is_red(cell) else Failure
        result = kind(xml_text(mismatch_message(cell)), cell.outcome.value)
        result.text = xml_text(cell_details(cell))
        case.result = [result]
    else:
        out.append(cell_details(cell))
    case.system_out = xml_text("\n".join(out))
    return case


def _not_run_testcase(group: str, ident: str, finished: bool) -> TestCase:
    case = _case(ident, f"{group}.{_backend_in_id(ident)}")
    why = "the run finished without a result for it" if finished else "the run stopped before it (killed?)"
    case.result = [Skipped(f"not run: {why}")]
    return case


def _incomplete_testcase(group: str, not_run: Sequence[str], finished: bool, planned: int) -> TestCase:
    case = _case(INCOMPLETE_TESTCASE, f"{group}.run")
    how = "the run finished" if finished else "the run was killed or timed out before its end"
    missing = f"{len(not_run)} of {planned} planned cells not run" if not_run else "every journaled cell ran"
    error = Error(xml_text(f"{how}: {missing}"), "incomplete-run")
    error.text = xml_text("\n".join(not_run) or "no end record in the journal")
    case.result = [error]
    return case


def _stale_testcase(group: str, stale: Sequence[object]) -> TestCase:
    case = _case(STALE_TESTCASE, f"{group}.expectations")
    failure = Failure(xml_text(f"{len(stale)} expectation rule(s) decide no cell: {stale[0]}"), "stale-expectations")
    failure.text = xml_text("\n".join(str(item) for item in stale))
    case.result = [failure]
    return case


def _suite(
    name: str, cases: Iterable[TestCase], properties: Iterable[tuple[str, str]], timestamp: str | None
) -> TestSuite:
    suite = TestSuite(xml_text(name))
    # Properties first: readers that stream the file want the environment before the cells.
    for key, value in properties:
        suite.add_property(xml_text(key), xml_text(value))
    if timestamp:
        suite.timestamp = xml_text(timestamp)
    counts = dict.fromkeys(("passed", "skipped", "failure", "error"), 0)
    elapsed = 0.0
    written = list(cases)
    for case in written:
        counts[status(case)] += 1
        elapsed += case.time or 0.0
    # Counted here from the statuses already known: junitparser's update_statistics would re-read
    # every testcase's results, and writes times with more digits than junit-10.xsd allows.
    suite.extend(written)
    suite.tests = len(written)
    suite.failures, suite.errors, suite.skipped = counts["failure"], counts["error"], counts["skipped"]
    suite._elem.set("time", seconds(elapsed))
    return suite


def _run_suite(report: Report, run: Run, name: str) -> TestSuite:
    if run.key in report.junit_only:
        foreign: ForeignSuite = report.junit_only[run.key]
        return _suite(name, foreign.cases, foreign.properties, foreign.timestamp)
    group = name.removeprefix(f"{SUITE_PREFIX}.")
    rows = report.rows_of(run.key)
    not_run = report.not_run_of(run.key)
    finished = run.key not in report.unfinished
    cases = [_cell_testcase(group, row) for row in rows]
    cases += [_not_run_testcase(group, ident, finished) for ident in not_run]
    if report.incomplete(run.key):
        cases.append(_incomplete_testcase(group, not_run, finished, len(rows) + len(not_run)))
    stale = report.stale_of(run.key)
    if stale:
        cases.append(_stale_testcase(group, stale))
    properties = [(key, value) for key, value in run.meta.items() if isinstance(value, str)]
    # The findings the run's cells show, one property each: what a dashboard lists as the run's known bugs.
    properties += [
        (
            f"finding:{item.finding.id}",
            f"{item.finding.title} · {item.finding.kind.value} · upstream: {item.finding.upstream_status} · "
            f"{len(item.cells)} cells · {item.status}",
        )
        for item in report.findings
        if item.run.key == run.key
    ]
    started = run.meta.get("started_at")
    return _suite(name, cases, properties, started if isinstance(started, str) else None)


def _document(suites: Sequence[TestSuite]) -> bytes:
    document = JUnitXml(SUITE_PREFIX)
    for suite in suites:
        document.add_testsuite(suite)
    # Only what junit-10.xsd allows on <testsuites>: no skipped (counted per suite).
    document.tests = sum(suite.tests or 0 for suite in suites)
    document.failures = sum(suite.failures or 0 for suite in suites)
    document.errors = sum(suite.errors or 0 for suite in suites)
    document._elem.set("time", seconds(sum(suite.time or 0.0 for suite in suites)))
    buffer = io.BytesIO()
    document.write(buffer)
    return buffer.getvalue()


def _suites(report: Report) -> list[tuple[str, TestSuite]]:
    names = suite_names(report)
    return [(names[run.key], _run_suite(report, run, names[run.key])) for run in report.runs]


def render_junit(report: Report) -> bytes:
    return _document([suite for _, suite in _suites(report)])


def render_junit_per_run(report: Report) -> dict[str, bytes]:
    """``junit-<suite name>.xml`` per run, for publishers that annotate by file."""
    files: dict[str, bytes] = {}
    for name, suite in _suites(report):
        stem = _NOT_IN_FILE_NAME.sub("-", name).strip("-")
        file_name = f"junit-{stem}.xml"
        number = 2
        while file_name in files:
            file_name, number = f"junit-{stem}-{number}.xml", number + 1
        files[file_name] = _document([suite])
    return files
