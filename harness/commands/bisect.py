"""Find the first vLLM release that changed each of some cells (binary search, installs releases).

    dflash-matrix bisect MATRIX CELL... --old 0.24.0 --new 0.33.0 [--out DIR] [--keep-envs 2]
    dflash-matrix bisect MATRIX CELL... --releases vllm==0.24.0 ./vllm-dev.whl ...

The releases in between are those the package index offers (asked of pip). Each release
probed is installed once into a cached venv under --cache (at most --keep-envs at a time, the
least recently used deleted first; --reuse-env RELEASE=PATH adds an env you already have),
and only the requested cells run there. Prints one line per cell, names the releases that
could not be installed, and writes bisect.json (answers, probes, install and run times, disk).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.bisection import BisectError, Signature, Uninstallable, bisect, releases_between
from harness.bundled import matrix_path
from harness.errors import InputError
from harness.matrix import expand, load_matrix
from harness.release_envs import ReleaseEnvs, offered_releases, run_cells
from harness.stub_driver import cache_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("matrix", metavar="MATRIX", help="matrix file or shipped matrix name (selection, ...)")
    parser.add_argument("cells", metavar="CELL", nargs="+", help="cell ids of that matrix")
    parser.add_argument("--old", metavar="VERSION", help="the release whose verdicts are the reference")
    parser.add_argument("--new", metavar="VERSION", help="the newest release of the range")
    parser.add_argument("--releases", nargs="+", metavar="REQ", help="instead: pip requirements in order, oldest first")
    parser.add_argument("--out", metavar="DIR", default="bisect", help="bisect.json and each probe's report (bisect/)")
    parser.add_argument("--cache", metavar="DIR", help="where the release envs live (default: the harness cache)")
    parser.add_argument("--keep-envs", type=int, default=2, metavar="N", help="release envs kept at once (default 2)")
    parser.add_argument("--reuse-env", action="append", default=[], metavar="RELEASE=PATH", help="an existing env")
    parser.add_argument("--clean", action="store_true", help="delete the release envs this run built when done")


def _version(text: str, option: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion:
        raise InputError(option, "", f"{text!r} is not a vLLM version such as 0.33.0") from None


def requirement_for(label: str) -> str:
    """A bare version means that vLLM release; anything else is a pip requirement as given."""
    try:
        Version(label)
    except InvalidVersion:
        return label
    return f"vllm=={label}"


def _releases(args: argparse.Namespace) -> tuple[str, ...]:
    """The ordered releases (versions, or pip requirements given with --releases)."""
    if args.releases:
        if args.old or args.new:
            raise InputError("--releases", "", "give either --releases or --old/--new, not both")
        return tuple(args.releases)
    if not args.old or not args.new:
        raise InputError("--old/--new", "", "both are needed (or --releases REQ...)")
    old, new = _version(args.old, "--old"), _version(args.new, "--new")
    if old >= new:
        raise InputError("--old", "", f"{args.old} is not older than --new {args.new}")
    try:
        offered = offered_releases()
    except RuntimeError as error:
        raise InputError("bisect", "", str(error)) from None
    for option, text in (("--old", args.old), ("--new", args.new)):
        if text not in offered:
            near = [v for v in offered if Version(v).major == Version(text).major][:12]
            raise InputError(option, "", f"vLLM {text} is not offered by the package index", near)
    return releases_between(offered, args.old, args.new)


def run(args: argparse.Namespace) -> int:
    path = matrix_path(args.matrix)
    matrix = load_matrix(path)
    known = {cell.id for cell in expand(matrix)}
    unknown = [cell for cell in args.cells if cell not in known]
    if unknown:
        raise InputError(path, "cells", f"no cell {unknown[0]!r} in this matrix (list them: dflash-matrix cells)")
    reuse = {}
    for item in args.reuse_env:
        release, _, folder = item.partition("=")
        if not folder or not (Path(folder) / "bin" / "python").exists():
            raise InputError("--reuse-env", "", f"{item!r} is not RELEASE=PATH of a venv")
        reuse[release] = Path(folder)
    releases = _releases(args)
    out = Path(args.out)
    root = Path(args.cache) if args.cache else cache_dir() / "bisect"
    envs = ReleaseEnvs(root, keep=max(1, args.keep_envs), requirement=requirement_for, reuse=reuse)
    runs: list[dict[str, object]] = []

    def probe(release: str, cells: object) -> Mapping[str, Signature] | Uninstallable:
        print(f"bisect: probing vLLM {release} ...", file=sys.stderr, flush=True)
        env = envs.env_for(release)
        if isinstance(env, Uninstallable):
            print(f"bisect: vLLM {release} cannot be installed: {env.reason}", file=sys.stderr, flush=True)
            return env
        started = time.monotonic()
        answers = run_cells(env, path.resolve(), list(args.cells), out / "releases" / _slug(release), root)
        runs.append({"release": release, "run_s": round(time.monotonic() - started, 1), "cells": len(answers)})
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
    for answer in answers:
        print(answer.line())
    for release, reason in state.uninstallable.items():
        print(f"not installable: vLLM {release}: {reason}")
    out.mkdir(parents=True, exist_ok=True)
    document = {
        "matrix": str(path),
        "releases": list(releases),
        "probed": state.probed,
        "uninstallable": state.uninstallable,
        "answers": [answer.to_json() for answer in answers],
        "installs": envs.log,
        "runs": runs,
        "wall_s": wall,
        "peak_env_bytes": envs.peak_bytes,
    }
    (out / "bisect.json").write_text(json.dumps(document, indent=2) + "\n")
    print(f"bisect: {len(state.probed)} releases probed in {wall:.0f} s; wrote {out / 'bisect.json'}")
    return 0


def _slug(release: str) -> str:
    return "".join(c if c.isalnum() or c in ".-_" else "_" for c in release)[-80:]
