"""Reading finished reports back in: matrix.json files, journals and JUnit files.

Everything here is untrusted: it comes from other runners, other machines, or an
attacker's pull request artifacts. XML is parsed with defusedxml (entities, DTDs
and external references refused); every problem becomes one InputError line that
names the file and what is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree.ElementTree import ParseError

import defusedxml.ElementTree
from defusedxml import DefusedXmlException
from junitparser import JUnitXml, JUnitXmlError

from harness.errors import InputError
from harness.journal import JOURNAL_SUFFIX, read_journals
from harness.reports.model import READABLE_SCHEMAS, Run, RunResults, results_from_journal, run_from_meta
from harness.result import CellResult, RecordError


@dataclass(frozen=True)
class JUnitInput:
    source: str
    xml: JUnitXml


@dataclass(frozen=True)
class Inputs:
    results: tuple[RunResults, ...]
    junit: tuple[JUnitInput, ...]


_KINDS = "a .json matrix report, a .jsonl journal, a .xml JUnit file, or a directory holding them"


def input_files(paths: Iterable[str | Path]) -> list[Path]:
    """Files named directly, and every report file inside a named directory (recursively)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".xml"))
            if not inside:
                raise InputError(path, "", "directory holds no report files", (_KINDS,))
            found.extend(inside)
        elif not path.exists():
            raise InputError(path, "", "no such file or directory")
        elif path.suffix not in (".json", ".jsonl", ".xml"):
            raise InputError(path, "", "unknown input type", (_KINDS,))
        else:
            found.append(path)
    return found


def load_inputs(paths: Iterable[str | Path]) -> Inputs:
    results: list[RunResults] = []
    junit: list[JUnitInput] = []
    for path in input_files(paths):
        if path.suffix == ".xml":
            junit.append(JUnitInput(str(path), read_junit(path)))
        elif path.suffix == JOURNAL_SUFFIX:
            results.append(read_journal(path))
        else:
            results.extend(read_matrix_json(path))
    return Inputs(tuple(results), tuple(junit))


def read_junit(path: Path) -> JUnitXml:
    try:
        xml = JUnitXml.fromfile(str(path), parse_func=defusedxml.ElementTree.parse)
    except DefusedXmlException as exc:
        raise InputError(path, "", f"unsafe XML refused ({type(exc).__name__})") from None
    except ParseError as exc:
        raise InputError(path, "", f"not well-formed XML ({exc})") from None
    except JUnitXmlError:
        raise InputError(path, "", "not a JUnit report: wrong root element", ("testsuites", "testsuite")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, "", f"cannot read ({exc})") from None
    _check_junit(path, xml)
    return xml


def _check_junit(path: Path, xml: JUnitXml) -> None:
    """junitparser reads attributes lazily: a bad one would surface mid-merge as a traceback
    (time="soon"), or be copied into a merged junit.xml that fails the schema. Refuse it here."""
    for suite in xml:
        where = f"testsuite {suite.name!r}"
        for prop in suite.properties():
            if prop.name is None or prop.value is None:
                raise InputError(path, where, "a property needs a name and a value")
        for case in suite:
            if not case.name:
                raise InputError(path, where, "a testcase has no name")
            time = case._elem.get("time")
            try:
                seconds = float(time.replace(",", "")) if time else 0.0
            except ValueError:
                seconds = math.nan
            if not math.isfinite(seconds) or seconds < 0:
                raise InputError(path, f"{where}: testcase {case.name!r}", f"time {time!r} is not a number of seconds")


def read_journal(path: Path) -> RunResults:
    # One file at a time: each journal is one writer of one run, and runs must stay apart.
    return dataclasses.replace(results_from_journal(read_journals([path])), source=str(path))


def load_json(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(path, "", f"cannot read ({exc})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(path, "", f"not JSON ({exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise InputError(path, "", "JSON nested too deeply") from None
    except ValueError:  # an integer past Python's int_max_str_digits limit
        raise InputError(path, "", "JSON number too long to read") from None


def read_matrix_json(path: Path) -> list[RunResults]:
    """A matrix.json: dflash-matrix/2 (``runs``), or /1 of one run (``run``) or of a merge (``runs``)."""
    data = load_json(path)
    if not isinstance(data, dict):
        raise InputError(path, "", "not a matrix report: expected a JSON object")
    if data.get("schema") not in READABLE_SCHEMAS:
        raise InputError(path, "schema", f"{data.get('schema')!r} is not a known report schema", READABLE_SCHEMAS)
    cells = data.get("cells")
    if not isinstance(cells, list):
        raise InputError(path, "cells", "must be a list of cell records")
    stale = _list(path, data, "stale_expectations")
    if isinstance(data.get("run"), dict):
        run = run_from_meta(data["run"])
        finished = data["run"].get("ended_at") is not None
        return [RunResults(str(path), run, _cells(path, cells), _id_list(path, data.get("not_run")), stale, finished)]
    if not isinstance(data.get("runs"), list):
        raise InputError(path, "runs", "missing: a report needs 'runs' (or, in dflash-matrix/1, 'run')", ("runs",))
    runs: dict[str, Run] = {}
    run_stale: dict[str, tuple[Any, ...]] = {}
    ended: dict[str, bool] = {}
    for index, meta in enumerate(data["runs"]):
        if not isinstance(meta, dict) or not isinstance(meta.get("key"), str):
            raise InputError(path, f"runs[{index}]", "must be an object with a 'key'")
        described = {k: v for k, v in meta.items() if k not in _RUN_ENTRY_FIELDS}
        runs[meta["key"]] = run_from_meta(described)
        run_stale[meta["key"]] = _list(path, meta, "stale_expectations", f"runs[{index}].")
        # /2 says so; a /1 merge only has the end time the run's journal gave it.
        ended[meta["key"]] = meta["finished"] is True if "finished" in meta else meta.get("ended_at") is not None
    by_run: dict[str, list[CellResult]] = {key: [] for key in runs}
    for index, record in enumerate(cells):
        key = record.get("run") if isinstance(record, dict) else None
        if key not in runs:
            raise InputError(path, f"cells[{index}].run", f"{key!r} names no run in 'runs'", tuple(runs)[:5])
        by_run[key].append(_cell(path, index, record))
    missing: dict[str, list[str]] = {key: [] for key in runs}
    for index, item in enumerate(data.get("not_run") or ()):
        if not isinstance(item, dict) or item.get("run") not in runs or not isinstance(item.get("id"), str):
            raise InputError(path, f"not_run[{index}]", "must be an object with 'run' (a run key) and 'id'")
        missing[item["run"]].append(item["id"])
    if stale and runs and not any(run_stale.values()):
        # dflash-matrix/1 listed stale rules once for the whole report: keep them, on its first run.
        run_stale[next(iter(runs))] = stale
    return [
        RunResults(str(path), run, tuple(by_run[key]), tuple(missing[key]), run_stale[key], ended[key])
        for key, run in runs.items()
    ]


# What a runs[] entry of matrix.json adds to the run's own metadata (see matrix_json.py).
_RUN_ENTRY_FIELDS = ("key", "label", "suite", "finished", "incomplete", "stale_expectations")


def _list(path: Path, data: dict[str, Any], key: str, where: str = "") -> tuple[Any, ...]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise InputError(path, f"{where}{key}", "must be a list")
    return tuple(value)


def _cells(path: Path, records: list[Any]) -> tuple[CellResult, ...]:
    return tuple(_cell(path, index, record) for index, record in enumerate(records))


def _cell(path: Path, index: int, record: object) -> CellResult:
    try:
        return CellResult.from_json(record)
    except RecordError as exc:
        raise InputError(path, f"cells[{index}]", str(exc)) from None


def _id_list(path: Path, value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError(path, "not_run", "must be a list of cell ids")
    # Plain ids, or objects carrying one: both are how a report may list what never ran.
    ids = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            ids.append(item)
        elif isinstance(item, dict) and isinstance(item.get("id"), str):
            ids.append(item["id"])
        else:
            raise InputError(path, f"not_run[{index}]", "must be a cell id")
    return tuple(ids)
