"""Change a lane's expectations: `record` a new release from a reviewed watch delta, and mark which
recorded releases were `measured` with today's harness.

    dflash-matrix expectations record watch/selection/0.34.0/delta.json \\
        --recheck reports/selection-0.33.0 reports/selection-0.34.0
    dflash-matrix expectations measured selection history/   # after `history --recorded`

`measured` re-judges saved reports (a history folder's per-release reports, or report folders): for
each whose every cell is as its release's expectations say, it records the lane's build-path
fingerprint (harness/watch/record.py) as that release's ``measured`` entry. `record` refuses while
an older recorded release's entry is not today's fingerprint: a change to the audit, the axes or a
lane's build path may have moved its cells, and nobody re-measured it.

`record` appends the delta's patch.toml (the rules `watch` proposed, reviewed: no TODO stub may be
left) to the lane's expectations file, its finding stubs to the findings file, and the release to
`releases`. Before anything is written it checks that, for every release already recorded, every
cell of the matrix keeps its expected verdict, message and finding (from the rules alone, no
report needed), and re-judges each saved report given with --recheck (judging needs no vLLM):
a recorded release's report must be judged as before, the new release's must now match on every
cell. A report it cannot re-judge (its vLLM is not recorded, or it names none) is listed so.
With --dry-run nothing is written.

The expectations file and the findings file are written as one set (both or neither: a full disk
or a read-only file leaves both as they were), under a lock in their folder: a second `record` at
the same time waits for the first, then reads the files again, so both releases are kept.

Exit status: 0 when recorded (or it would be, with --dry-run); 1 when a check refused it (a recorded
release's judgement would move, or the new release's report would still not match); 2 on bad input
(also a file that cannot be written: nothing is written then).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import tempfile
from pathlib import Path
from typing import Any

from packaging.version import Version

from harness.atomic import locked, write_set
from harness.bundled import matrix_path
from harness.commands.repro import report_document
from harness.errors import InputError
from harness.expectations import ExpectationSet, Rule, lane_fingerprint, load_expectations
from harness.matrix import Cell, Matrix, expand, load_matrix
from harness.reports.inputs import load_json
from harness.tomlfile import parse_release, read_toml
from harness.watch.delta import changed_cells
from harness.watch.record import (
    Patch,
    PatchError,
    appended,
    moved_judgements,
    read_patch,
    report_release,
    stale_releases,
    with_measured,
    with_release,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    record = actions.add_parser("record", help="record a new release from a reviewed watch delta")
    record.add_argument("delta", metavar="DELTA", help="the delta.json watch wrote (its patch.toml beside it)")
    record.add_argument("--patch", metavar="FILE", help="the reviewed patch (default: patch.toml beside DELTA)")
    record.add_argument("--matrix", metavar="MATRIX", help="the matrix (default: the one the delta names)")
    record.add_argument(
        "--recheck", nargs="+", default=[], metavar="REPORT", help="saved lane reports (folders or matrix.json)"
    )
    measured = actions.add_parser(
        "measured", help="mark the recorded releases whose saved reports are every cell as expected as measured today"
    )
    measured.add_argument("matrix", metavar="MATRIX", help="matrix file or shipped matrix name")
    measured.add_argument(
        "reports", nargs="+", metavar="REPORT", help="report folders, matrix.json, or a history folder"
    )
    measured.add_argument("--dry-run", action="store_true", help="check and say what would be written, write nothing")
    record.add_argument("--dry-run", action="store_true", help="check everything, write nothing")


def _delta(path: Path) -> dict[str, Any]:
    data = load_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("version") or data.get("release"), str):
        raise InputError(path, "version", "not a delta.json written by dflash-matrix watch")
    if "no_delta" in data:
        reason = data["no_delta"].get("reason") if isinstance(data["no_delta"], dict) else data["no_delta"]
        raise InputError(path, "no_delta", f"this release gave no delta to record: {reason}")
    return data


def _text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(path, "", f"no such {what}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(path, "", f"cannot read the {what}: {getattr(error, 'strerror', None) or error}") from None


def run(args: argparse.Namespace) -> int:
    if args.action == "measured":
        return _measured(args)
    delta_path = Path(args.delta)
    delta = _delta(delta_path)
    release = str(delta.get("version") or delta["release"])
    try:
        parse_release(release)
    except ValueError as error:
        raise InputError(delta_path, "version", str(error)) from None
    matrix = load_matrix(matrix_path(args.matrix or str(delta.get("matrix"))))
    if matrix.expectations_path is None:
        raise InputError(matrix.path, "matrix.expectations", "names no expectations file to record in")
    patch_path = Path(args.patch) if args.patch else delta_path.with_name("patch.toml")
    try:
        patch = read_patch(_text(patch_path, "patch"))
    except PatchError as error:
        raise InputError(patch_path, error.key, error.problem) from None
    reports = [(item, report_document(Path(item))) for item in args.recheck]  # bad input stops here
    # Read, checked and written under one lock: two records at once once both said "wrote", and one
    # release was lost (issue 36). The second waits, then reads what the first wrote.
    target = matrix.expectations_path
    with locked(target.parent, wait=True):
        return _record(args, matrix, target, release, delta, patch, reports)


def _record(
    args: argparse.Namespace,
    matrix: Matrix,
    target: Path,
    release: str,
    delta: dict[str, Any],
    patch: Patch,
    reports: list[tuple[str, dict[str, Any]]],
) -> int:
    before = load_expectations(target, matrix)
    if parse_release(release) in before.releases:
        raise InputError(target, "expectations.releases", f"already records {release}")
    fingerprint = lane_fingerprint(matrix)
    stale = stale_releases(before, fingerprint, older_than=parse_release(release))
    if stale:
        print(
            f"refused: vLLM {', '.join(stale)} not measured with today's {matrix.lane} build path ({fingerprint}): "
            f"re-measure them first (dflash-matrix history {matrix.name} --recorded, then "
            f"dflash-matrix expectations measured {matrix.name} HISTORY); nothing written"
        )
        return 1
    findings_name = read_toml(target).get("expectations", {}).get("findings")
    heading = f"# ---- vLLM {release} (recorded from dflash-matrix watch, judged against {delta.get('judged_as')}) ----"
    try:
        texts = {target: with_release(appended(_text(target, "expectations file"), patch.rules, heading), release)}
    except PatchError as error:
        raise InputError(target, error.key, error.problem) from None
    if patch.findings:
        if not isinstance(findings_name, str) or not findings_name:
            raise InputError(target, "expectations.findings", "the patch proposes findings but the file names none")
        findings = target.parent / findings_name
        seen = f"# ---- first seen in vLLM {release} ----"
        texts[findings] = appended(_text(findings, "findings file"), patch.findings, seen)
    after = _checked_copy(target, texts, matrix)
    _check_values(args.patch or str(Path(args.delta).with_name("patch.toml")), after.rules[len(before.rules) :], matrix)

    cells = expand(matrix)
    status = 0
    moved = moved_judgements(before, after, cells, before.releases)
    for moved_release, ids in moved.items():
        print(f"refused: vLLM {moved_release}'s judgement would move on {len(ids)} cells, e.g. {', '.join(ids[:5])}")
        status = 1
    if not moved:
        recorded = ", ".join(str(version) for version in before.releases)
        print(f"every recorded release ({recorded}) keeps every cell's expectation ({len(cells)} cells each)")
    rejudged = set()
    for source, document in reports:
        line, ok, judged_release = _recheck(source, document, before, after, cells, release)
        print(line)
        status = status if ok else 1
        if judged_release:
            rejudged.add(judged_release)
    unseen = [str(version) for version in (*before.releases, parse_release(release)) if str(version) not in rejudged]
    if unseen:
        print(f"no saved report re-judged for: {', '.join(unseen)} (give them with --recheck)")
    if status or args.dry_run:
        print("nothing written" + ("" if status else " (--dry-run)"))
        return status
    try:
        write_set({path: text.encode("utf-8") for path, text in texts.items()})
    except OSError as error:
        where = error.filename or target
        raise InputError(where, "", f"cannot write ({error.strerror or error}); nothing written") from None
    for path in texts:
        print(f"wrote {path}")
    return 0


def _checked_copy(target: Path, texts: dict[Path, str], matrix: Matrix) -> ExpectationSet:
    """The patched expectations, loaded (and so checked: findings named, rules valid) from a copy."""
    with tempfile.TemporaryDirectory() as folder:
        copy = Path(folder) / target.parent.name
        shutil.copytree(target.parent, copy)
        for path, text in texts.items():
            # A read-only original is copied read-only: the copy is ours to replace.
            (copy / path.name).unlink(missing_ok=True)
            (copy / path.name).write_text(text)
        try:
            return load_expectations(copy / target.name, matrix)
        except InputError as error:
            raise InputError(target, error.key, f"with the patch: {error.problem}", error.choices or None) from None


def _check_values(patch: str, rules: tuple[Rule, ...], matrix: Matrix) -> None:
    """A proposed rule must decide a cell of this matrix: a value no axis holds (a backend the matrix
    does not list) would be recorded, and stale from the first run on."""
    axes = dict(matrix.all_axes)
    for number, rule in enumerate(rules):
        for axis, accepted in rule.when:
            for value in accepted:
                if value not in axes.get(axis, ()):
                    key = f"expect[{number}].when.{axis}"
                    raise InputError(patch, key, f"{value!r} is no value of the matrix's {axis} axis", axes.get(axis))


def _recheck(
    source: str,
    document: dict[str, Any],
    before: ExpectationSet,
    after: ExpectationSet,
    cells: tuple[Cell, ...],
    new: str,
) -> tuple[str, bool, str | None]:
    """One report re-judged: its line, whether it passes the check, and the release it was judged as."""
    release = report_release(document)
    if release is None:
        return f"{source}: could not be re-judged: its runs name no single vLLM version", True, None
    if parse_release(release) not in after.releases:
        return f"{source}: could not be re-judged: vLLM {release} is not a recorded release", True, None
    old, judged = changed_cells(document, cells, before.for_release(release))
    now, _ = changed_cells(document, cells, after.for_release(release))
    if not judged:
        where = Path(after.path or "").name
        return f"{source}: could not be re-judged: none of its cells is a cell of {where}", True, None
    old_ids, now_ids = sorted(change.id for change in old), sorted(change.id for change in now)
    if release == new:
        ok = not now_ids
        shown = "" if ok else f"; still not: {', '.join(now_ids[:5])}"
        was = judged - len(old_ids)
        line = f"{source}: vLLM {release}: {judged - len(now_ids)} of {judged} cells as expected (was {was}){shown}"
        return line, ok, release
    ok = old_ids == now_ids
    line = f"{source}: vLLM {release}: {judged - len(now_ids)} of {judged} cells as expected, " + (
        "unchanged" if ok else f"MOVED (before: {judged - len(old_ids)})"
    )
    return line, ok, release


def _report_files(given: str) -> list[Path]:
    """A report's matrix.json; a history folder's, one per release (``<out>/releases/<release>/``)."""
    path = Path(given)
    if path.is_dir() and (path / "releases").is_dir():
        found = sorted((path / "releases").glob("*/matrix.json"))
        if not found:
            raise InputError(path, "releases", "holds no release report (matrix.json)")
        return found
    return [path]


def _measured(args: argparse.Namespace) -> int:
    matrix = load_matrix(matrix_path(args.matrix))
    target = matrix.expectations_path
    if target is None:
        raise InputError(matrix.path, "matrix.expectations", "names no expectations file")
    documents = [(str(p), report_document(p)) for given in args.reports for p in _report_files(given)]
    with locked(target.parent, wait=True):
        expectations = load_expectations(target, matrix)
        fingerprint = lane_fingerprint(matrix)
        cells = expand(matrix)
        measured = {str(release): value for release, value in expectations.measured.items()}
        status = 0
        for source, document in documents:
            release = report_release(document)
            if release is None or parse_release(release) not in expectations.releases:
                print(f"{source}: not a report of a recorded release ({release or 'no single vLLM'}): skipped")
                continue
            ran_with = sorted({str(run.get("build_fingerprint")) for run in document.get("runs", [])})
            if ran_with != [fingerprint]:
                print(f"{source}: vLLM {release}: run with build path {', '.join(ran_with)}, not today's: not measured")
                status = 1
                continue
            changed, judged = changed_cells(document, cells, expectations.for_release(release))
            if judged != len(cells) or changed:
                print(
                    f"{source}: vLLM {release}: {judged - len(changed)} of {len(cells)} cells as expected: not measured"
                )
                status = 1
                continue
            measured[release] = fingerprint
            print(f"{source}: vLLM {release}: every cell as expected: measured ({fingerprint})")
        stale = stale_releases(
            dataclasses.replace(expectations, measured={Version(k): v for k, v in measured.items()}), fingerprint
        )
        if stale:
            print(f"still not measured with today's build path: {', '.join(stale)}")
        if args.dry_run or not measured:
            print("nothing written" + (" (--dry-run)" if args.dry_run else ""))
            return status
        text = with_measured(_text(target, "expectations file"), measured)
        try:
            write_set({target: text.encode("utf-8")})
        except OSError as error:
            raise InputError(target, "", f"cannot write ({error.strerror or error}); nothing written") from None
        print(f"wrote {target}")
        return status
