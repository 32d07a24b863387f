"""What the JUnit consumers people put in front of junit.xml make of it.

- xunit-viewer (npm, pinned in tests/reports/consumers/package-lock.json): its own parser, run by
  node through consumers/xunit_viewer.mjs.
- junit2html (PyPI, pinned in tox.ini): its parser, its matrix and its command line.
- EnricoMi/publish-unit-test-result-action v2.23.0 (the action .github/workflows/gpu-matrix.yml
  pins, commit c950f6fb443cb5af20a377fd0dfaa78838901040) is no package: CI cannot install it. Its
  parser is re-read below, step by step, from its source at that tag, each step citing the file
  and lines it follows. With DFLASH_ENRICOMI_SOURCE set to the action's ``python/`` folder at that
  tag, ``enricomi`` runs the action's own modules instead (test_consumers.py checks both agree).

Each returns a small, plain view: what the consumer counts, how it keys tests and suites, and
the conclusion it draws (red or green).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CONSUMERS = Path(__file__).parent / "consumers"
REQUIRED = os.environ.get("DFLASH_REQUIRE_CONSUMERS") == "1"


def _missing(what: str) -> None:
    if REQUIRED:
        pytest.fail(f"DFLASH_REQUIRE_CONSUMERS=1 but {what}")
    pytest.skip(what)


# ---- xunit-viewer --------------------------------------------------------------------------


def xunit_viewer(files: Sequence[Path]) -> dict[str, Any]:
    """``{"description": "3 passed, 1 error", "suites": {name: {"classname name": status}}}``."""
    node = shutil.which("node")
    if node is None or not (CONSUMERS / "node_modules" / "xunit-viewer").is_dir():
        _missing("xunit-viewer is not installed (npm ci --prefix tests/reports/consumers)")
    done = subprocess.run(
        [str(node), str(CONSUMERS / "xunit_viewer.mjs"), *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    data = json.loads(done.stdout)
    suites: dict[str, dict[str, str]] = {}
    messages: dict[str, dict[str, list[str]]] = {}
    for suite in data["suites"]:
        suites.setdefault(suite["name"], {})
        messages.setdefault(suite["name"], {})
        for test in suite["tests"]:
            key = f"{test['classname']} {test['name']}"
            suites[suite["name"]][key] = test["status"]
            messages[suite["name"]][key] = test["messages"]
    return {"description": data["description"], "suites": suites, "messages": messages}


# ---- junit2html ----------------------------------------------------------------------------


def junit2html(files: Sequence[Path]) -> dict[str, Any]:
    """Its parsed suites (name -> {classname name: outcome}) and the exit status of
    ``junit2html --summary-matrix --max-failures 1``: non-zero is its red."""
    try:
        from junit2htmlreport import parser
    except ImportError:
        _missing("junit2html is not installed (tox -e reports installs it)")
    suites: dict[str, dict[str, str]] = {}
    for path in files:
        for suite in parser.Junit(filename=str(path)).suites:
            cases = suites.setdefault(suite.name, {})
            for case in suite.all():
                cases[f"{case.testclass.name} {case.name}"] = str(case.outcome())
    gate = subprocess.run(
        [sys.executable, "-m", "junit2htmlreport", "--summary-matrix", "--max-failures", "1", *map(str, files)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return {"suites": suites, "exit_status": gate.returncode, "matrix": gate.stdout}


# ---- EnricoMi/publish-unit-test-result-action v2.23.0 ---------------------------------------


@dataclass(frozen=True)
class Annotation:
    level: str  # notice | warning | failure: how GitHub colours it (failure = red)
    title: str


@dataclass(frozen=True)
class EnricoMiView:
    suite_tests: int
    suite_skipped: int
    suite_failures: int
    suite_errors: int
    tests: dict[tuple[str | None, str, str], str]  # (file, classname, name) -> state
    annotations: tuple[Annotation, ...]
    conclusion: str  # the check run's: success | failure


_SEVERITY = ("error", "failure", "success", "skipped")


def _case_state(case: ET.Element) -> str:
    # python/publish/junit.py L33-53 get_results: of a testcase's results, the most severe state
    # in the order error, failure, success, skipped; L56-66 get_result: the element's tag, or
    # 'success' when it has none.
    states = {child.tag for child in case if child.tag in ("error", "failure", "skipped")}
    return next((state for state in _SEVERITY if state in states), "success")


def _leaf_cases(suite: ET.Element) -> list[ET.Element]:
    # junit.py L230-242 get_cases: testcases of nested suites first, then the suite's own.
    return [case for inner in suite.findall("testsuite") for case in _leaf_cases(inner)] + suite.findall("testcase")


def _count(suite: ET.Element, name: str) -> int:
    # junit.py L217-221: the suite-level totals come from each <testsuite>'s attributes.
    value = suite.get(name)
    return int(value) if value else 0


def _reread(files: Sequence[Path]) -> EnricoMiView:
    suites: list[ET.Element] = []
    cases: list[tuple[str, str, str]] = []  # (classname, name, state)
    for path in files:
        root = ET.parse(path).getroot()
        # junit.py L213-215: a <testsuites> root gives its <testsuite> children, a <testsuite> root itself.
        for suite in list(root) if root.tag == "testsuites" else [root]:
            suites.append(suite)
            # junit.py L282-302: one UnitTestCase per testcase with its classname, name and state.
            cases += [
                (case.get("classname", ""), case.get("name", ""), _case_state(case)) for case in _leaf_cases(suite)
            ]
    # unittestresults.py L418-428 get_test_results: tests are keyed by (file if
    # deduplicate_classes_by_file_name else None, classname, name) -- the suite name is not in
    # the key -- and L390-394 aggregate_states keeps error > failure > success > skipped.
    states: dict[tuple[str | None, str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for classname, name, state in cases:
        states[(None, classname, name)][state] += 1
    tests = {key: next(s for s in _SEVERITY if s in found) for key, found in states.items()}
    annotations = []
    # __init__.py L852-861 get_case_annotations: one annotation per test and state other than
    # success/skipped; L787-849 get_case_annotation: title and level.
    for (_, classname, name), found in states.items():
        total = sum(found.values())
        for state, same in found.items():
            if state in ("success", "skipped"):
                continue
            title = name if not classname else f"{name} ({classname})"
            words = "failed" if state == "failure" else "with error"
            if total > 1:  # L818-821: one test seen in several runs
                title = (
                    f"All {total} runs {words}: {title}"
                    if same == total
                    else f"{same} out of {total} runs {words}: {title}"
                )
            else:
                title = f"{title} {words}"
            # L825-829: a <failure> is a 'warning' annotation, an <error> a 'failure' one.
            annotations.append(Annotation("warning" if state == "failure" else "failure", title))
    suite_failures = sum(_count(suite, "failures") for suite in suites)
    suite_errors = sum(_count(suite, "errors") for suite in suites)
    # publish_test_results.py L33-41 get_conclusion with fail_on 'test failures' (the default,
    # L444-448; our workflow leaves it): failure when the suites count a failure or an error.
    conclusion = "failure" if suite_failures or suite_errors else "success"
    return EnricoMiView(
        suite_tests=sum(_count(suite, "tests") for suite in suites),
        suite_skipped=sum(_count(suite, "skipped") for suite in suites),
        suite_failures=suite_failures,
        suite_errors=suite_errors,
        tests=tests,
        annotations=tuple(annotations),
        conclusion=conclusion,
    )


def _the_action(files: Sequence[Path], source: str) -> EnricoMiView:
    """The same view from the action's own modules (python/publish at v2.23.0)."""
    sys.path.insert(0, source)
    try:
        from publish import get_case_annotations
        from publish.junit import parse_junit_xml_files, process_junit_xml_elems
        from publish.unittestresults import get_test_results
    finally:
        sys.path.remove(source)
    parsed = process_junit_xml_elems(parse_junit_xml_files([str(f) for f in files], False, False))
    results = get_test_results(parsed.with_commit("0" * 40), False)
    tests = {
        key: ("error" if "error" in s else "failure" if "failure" in s else "success" if "success" in s else "skipped")
        for key, s in results.case_results.items()
    }
    failing = parsed.suite_failures > 0 or parsed.suite_errors > 0
    return EnricoMiView(
        suite_tests=parsed.suite_tests,
        suite_skipped=parsed.suite_skipped,
        suite_failures=parsed.suite_failures,
        suite_errors=parsed.suite_errors,
        tests=tests,
        annotations=tuple(
            Annotation(a.annotation_level, a.title) for a in get_case_annotations(results.case_results, False)
        ),
        conclusion="failure" if failing or parsed.errors else "success",
    )


def enricomi(files: Sequence[Path], *, reread: bool = False) -> EnricoMiView:
    source = os.environ.get("DFLASH_ENRICOMI_SOURCE")
    if source and not reread:
        return _the_action(files, source)
    return _reread(files)
