"""Find the first vLLM release that changed each of some cells (binary search, installs releases).

    dflash-matrix bisect MATRIX CELL... --old 0.24.0 --new 0.33.0 [--out DIR] [--keep-envs 2]
    dflash-matrix bisect MATRIX CELL... --releases vllm==0.24.0 ./vllm-dev.whl ...

The releases in between are those the package index offers (asked of pip). Each release
probed is installed once into a cached venv under --cache (at most --keep-envs at a time, the
least recently used deleted first; --reuse-env RELEASE=PATH adds an env you already have),
and only the requested cells run there. A release installs with the overrides recorded for it
(harness/releases/overrides.toml) unless --override names its own; each probe says which. A
release that gives no verdict (it does not install, its lane does not start, or the cells crash
importing vLLM) is an environment failure: named with its reason, stepped around, never a change.
Prints one line per cell (with the finding the change starts or ends, by the matrix's
expectations for the releases on either side), then each environment failure, and writes bisect.json (answers, probes,
environment failures, install and run times, disk).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from harness.bundled import matrix_path
from harness.commands.release_range import (
    add_release_arguments,
    check_overridden,
    chosen_releases,
    release_envs,
)
from harness.errors import InputError
from harness.expectations import ExpectationSet, expectations_for
from harness.findings import finding_change
from harness.matrix import Cell, emulated_generations, expand, load_matrix
from harness.releases.bisection import Answers, BisectError, bisect
from harness.releases.environment import EnvironmentFailure
from harness.releases.envs import run_cells, slug
from harness.watch.plan import not_in_release_envs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", metavar="MATRIX", help="matrix file or shipped matrix name (selection, ...)")
    parser.add_argument("cells", metavar="CELL", nargs="+", help="cell ids of that matrix")
    add_release_arguments(parser, out="bisect", keep_envs=2, new_required=True)


def _finding_change(expectations: ExpectationSet, cell: Cell, before: str | None, after: str | None) -> str | None:
    """The finding a change starts or ends, by the expectations recorded for the releases on either side
    (releases given as pip requirements, wheels or commits have no version to judge by: nothing said)."""
    if before is None or after is None:
        return None
    try:
        sides = [expectations.for_release(release).for_cell(cell).finding for release in (before, after)]
    except ValueError:
        return None
    return finding_change(*(finding.id if finding else None for finding in sides))


def run(args: argparse.Namespace) -> int:
    path = matrix_path(args.matrix)
    matrix = load_matrix(path)
    why = not_in_release_envs(matrix.lane)
    if why:
        raise InputError(path, "matrix.lane", why)
    known = {cell.id for cell in expand(matrix)}
    unknown = [cell for cell in args.cells if cell not in known]
    if unknown:
        raise InputError(path, "cells", f"no cell {unknown[0]!r} in this matrix (list them: dflash-matrix cells)")
    envs = release_envs(args, "bisect")
    releases = chosen_releases(args, "bisect")
    check_overridden(args, releases)
    out = Path(args.out)
    root = envs.root
    runs: list[dict[str, object]] = []

    def probe(release: str, cells: object) -> Answers | EnvironmentFailure:
        overrides = envs.overrides_for(release).describe()
        with_overrides = f" with {overrides}" if overrides else ""
        print(f"bisect: probing vLLM {release}{with_overrides} ...", file=sys.stderr, flush=True)
        env = envs.env_for(release)
        if isinstance(env, EnvironmentFailure):
            print(f"bisect: {env.line()}", file=sys.stderr, flush=True)
            return env
        started = time.monotonic()
        report_dir = out / "releases" / slug(release)
        answers = run_cells(
            env,
            path.resolve(),
            list(args.cells),
            report_dir,
            root,
            release,
            envs.symptoms(release),
            emulated_generations(matrix),
        )
        seconds = round(time.monotonic() - started, 1)
        ran = 0 if isinstance(answers, EnvironmentFailure) else len(answers)
        runs.append({"release": release, "run_s": seconds, "cells": ran})
        return answers

    started = time.monotonic()
    try:
        answers, state = bisect(releases, list(args.cells), probe)
    except BisectError as error:
        raise InputError("bisect", "", str(error)) from None
    finally:
        if args.clean:
            envs.clean()
    wall = round(time.monotonic() - started, 1)
    cells = {cell.id: cell for cell in expand(matrix)}
    expectations = expectations_for(matrix)
    changes = {
        answer.cell: _finding_change(expectations, cells[answer.cell], answer.last_same, answer.first_changed)
        for answer in answers
    }
    for answer in answers:
        change = changes[answer.cell]
        print(answer.line() + (f" ({change})" if change else ""))
    failures = state.environment_failures()
    for failure in failures:
        print(f"{failure.line()} (stepped around: not a verdict, never a change)")
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "matrix": str(path),
        "releases": list(releases),
        "probed": state.probed,
        "environment_failures": [failure.to_json() for failure in failures],
        "answers": [{**answer.to_json(), "finding_change": changes[answer.cell]} for answer in answers],
        "installs": envs.log,
        "runs": runs,
        "wall_s": wall,
        "peak_env_bytes": envs.peak_bytes,
    }
    (out / "bisect.json").write_text(json.dumps(document, indent=2) + "\n")
    print(f"bisect: {len(state.probed)} releases probed in {wall:.0f} s; wrote {out / 'bisect.json'}")
    return 0
