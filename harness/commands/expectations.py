"""Change a lane's expectations: `record` a new release from a reviewed watch delta.

    dflash-matrix expectations record watch/selection/0.34.0/delta.json \\
        --recheck reports/selection-0.33.0 reports/selection-0.34.0

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
import shutil
import tempfile
from pathlib import Path
from typing import Any

from harness.atomic import locked, write_set
from harness.bundled import matrix_path
from harness.commands.repro import report_document
from harness.errors import InputError
from harness.expectations import ExpectationSet, Rule, load_expectations
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
