"""junit.xml: one testsuite per lane run, one testcase per cell, for CI dashboards.

    <testsuite name="dflash-matrix.cpu">  properties: lane, platform, device, versions, times...
      <testcase name="FLASH_ATTN-causal-sink-bf16" classname="cpu.FLASH_ATTN" time="1.2"/>
      <testcase ...><failure type="regression" message="expected pass, observed mismatch: ..."/></testcase>
      <testcase ...><error type="regression" message="expected pass, observed crash: ..."/></testcase>
      <testcase ...><skipped message="not run: ..."/></testcase>
      <testcase name="expectations::stale" classname="cpu.expectations"><failure .../></testcase>

A cell passes when its verdict is the expected one. An unexpected crash or timeout is an
<error> (the harness could not judge the backend), any other difference a <failure>.
"""

from __future__ import annotations

import io
import re
from typing import Any

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite

from harness.reports.model import RunReport
from harness.result import CellResult
from harness.verdict import Verdict

SUITE_PREFIX = "dflash-matrix"
STALE_TESTCASE = "expectations::stale"
_ERRORS = (Verdict.CRASH, Verdict.TIMEOUT)
# Characters XML 1.0 cannot carry at all; exception messages (ANSI colours, NULs) do contain them.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    return _NOT_XML.sub("\ufffd", str(value))


def mismatch_message(cell: CellResult) -> str:
    expected = cell.expected.value
    if cell.verdict == cell.expected and cell.expected_message:
        expected += f" with a message containing {cell.expected_message!r}"
    return f"expected {expected}, observed {cell.verdict.value}: {cell.message}"


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
    return "\n".join(lines)


def _backend(cell_axes: dict[str, Any]) -> str:
    return str(cell_axes.get("backend", "unknown"))


def _backend_in_id(ident: str) -> str:
    """Not-run cells are only ids; the backend token is the one written in capitals (or auto)."""
    for token in ident.split("-"):
        if token == "auto" or (token[:1].isupper() and token.upper() == token):
            return token
    return "unknown"


def _testcase(lane: str, cell: CellResult) -> TestCase:
    case = TestCase(xml_text(cell.id), xml_text(f"{lane}.{_backend(cell.axes)}"), round(cell.duration_s, 4))
    details = xml_text(cell_details(cell))
    if not cell.ok:
        unjudged = cell.verdict in _ERRORS and cell.verdict != cell.expected
        result = (Error if unjudged else Failure)(xml_text(mismatch_message(cell)), cell.outcome.value)
        result.text = details
        case.result = [result]
    else:
        case.system_out = details
    return case


def _not_run_testcase(lane: str, ident: str, finished: bool) -> TestCase:
    case = TestCase(ident, f"{lane}.{_backend_in_id(ident)}", 0.0)
    why = "the run finished without a result for it" if finished else "the run stopped before it (killed?)"
    case.result = [Skipped(f"not run: {why}")]
    return case


def _stale_testcase(lane: str, stale: tuple[str, ...]) -> TestCase:
    case = TestCase(STALE_TESTCASE, f"{lane}.expectations", 0.0)
    failure = Failure(xml_text(f"{len(stale)} expectation rule(s) decide no cell: {stale[0]}"), "stale-expectations")
    failure.text = xml_text("\n".join(stale))
    case.result = [failure]
    return case


def junit_document(report: RunReport) -> JUnitXml:
    suite = TestSuite(f"{SUITE_PREFIX}.{report.lane}")
    # Properties first: the schema wants them before the testcases.
    for key, value in report.run.items():
        if isinstance(value, str):
            suite.add_property(xml_text(key), xml_text(value))
    if report.run.get("started_at"):
        suite.timestamp = xml_text(report.run["started_at"])
    cases = [_testcase(report.lane, cell) for cell in report.cells]
    cases += [_not_run_testcase(report.lane, ident, report.finished) for ident in report.not_run]
    if report.stale_expectations:
        cases.append(_stale_testcase(report.lane, report.stale_expectations))
    suite.add_testcases(cases)
    document = JUnitXml(SUITE_PREFIX)
    document.add_testsuite(suite)
    document.update_statistics()
    return document


def render_junit(report: RunReport) -> bytes:
    buffer = io.BytesIO()
    junit_document(report).write(buffer)
    return buffer.getvalue()
