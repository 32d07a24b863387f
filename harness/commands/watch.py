"""Run lanes on the vLLM releases their expectations do not record yet, and write what changed.

    dflash-matrix watch selection gpu-emulated [--out watch/] [-n 2]
    dflash-matrix watch selection --release 0.33.0 --reuse-env 0.33.0=.tox/selection
    dflash-matrix watch selection --nightly https://.../vllm-0.35.0.dev3-...whl
    dflash-matrix watch selection --report 0.34.0=reports/selection-0.34.0   # judge a saved run
    dflash-matrix watch selection gpu-emulated --plan                       # the Actions job matrix

The releases are those the package index offers newer than the newest release a lane's
expectations record (``releases``), newest first, or those --release names, plus --nightly (any
pip requirement: a wheel URL, a commit). Each is installed in a release env as published (the
installer of bisect and history); a release that cannot be installed so is named with pip's line
and retried with the overrides recorded for it (harness/releases/overrides.toml), and both outcomes
are in the delta. The lane runs there (``dflash-matrix run``), and its report is judged against the
rules of the newest recorded release (harness/releases/delta.py): every cell that changed, grouped
by cause, each group classified, with a repro script of one cell (checked on the release where its
env is at hand) and the expectation rules that would record it. Written per lane and release under
--out: delta.json, delta.md, patch.toml (rules and finding stubs, for review; applied only by
``dflash-matrix expectations record``), repro/, and the lane's report under run/; watch.md and
watch.json list them all (watch.md also goes to $GITHUB_STEP_SUMMARY).

Exit status: 0 when every watched release gave a delta, an empty one or one whose install failed
(a changed cell is news, not a failure); 1 when the harness itself failed (a lane that wrote no
report, an index that could not be asked); 2 on bad options, before anything is installed (also a
--report that is broken, ran another vLLM than its label or a recorded release, and an --out another
watch is writing: the line names its pid).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.atomic import locked, refuse_overlap, writable_folder, write_atomic, write_set
from harness.bundled import matrix_path, shipped_matrices
from harness.commands.release_range import add_env_arguments, release_envs
from harness.commands.repro import report_document, script_for
from harness.errors import InputError
from harness.expectations import ExpectationSet, load_expectations
from harness.matrix import Matrix, emulated_generations, expand, load_matrix
from harness.releases.environment import INSTALL, LANE, EnvironmentFailure
from harness.releases.envs import ReleaseEnvs, cell_failures, offered_releases, run_lane, slug
from harness.releases.install import may_be_vllm
from harness.releases.processes import run_owned
from harness.reports.release_delta import delta_json, delta_markdown, patch_toml, watch_markdown
from harness.reports.step_summary import append_step_summary
from harness.tomlfile import parse_release
from harness.watch.delta import ReleaseDelta, changed_cells, group_changes, patched, unsettled
from harness.watch.plan import (
    WATCHED_LANES,
    InstallAttempt,
    WatchJob,
    job_plan,
    new_releases,
    not_watchable,
)
from harness.watch.record import report_release


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "lanes", nargs="+", metavar="LANE", help="matrices (names or files) of the selection and gpu_emulated lanes"
    )
    parser.add_argument(
        "--release",
        nargs="+",
        default=[],
        metavar="REQ",
        help="these releases (versions, or pip requirements such as a wheel URL) instead of asking the index",
    )
    parser.add_argument("--nightly", metavar="REQ", help="also watch this pip requirement (a nightly wheel URL)")
    parser.add_argument(
        "--report",
        action="append",
        default=[],
        metavar="RELEASE=DIR",
        help="judge this saved report of RELEASE (a lane report folder) instead of installing and running it",
    )
    parser.add_argument("--plan", action="store_true", help="print the JSON job matrix (lane x release) and stop")
    parser.add_argument(
        "--recorded",
        action="store_true",
        help="with --plan: the newest release each LANE's expectations record, not the new ones "
        "(the releases GPU runners run: gpu-matrix.yml); any lane with recorded releases",
    )
    parser.add_argument("--out", metavar="DIR", default="watch", help="where the deltas go (watch/)")
    parser.add_argument("-n", "--workers", type=int, default=2, metavar="N", help="pytest-xdist workers (default 2)")
    parser.add_argument("-k", metavar="EXPR", dest="keyword", help="only the cells pytest's -k EXPR selects")
    parser.add_argument(
        "--no-repro-check", action="store_true", help="write each group's repro script without running it"
    )
    add_env_arguments(parser, keep_envs=1)


@dataclasses.dataclass(frozen=True)
class Watched:
    matrix: Matrix
    expectations: ExpectationSet
    judged_as: str  # the newest recorded release

    @property
    def lane(self) -> str:
        return self.matrix.name


def _watched(name: str, *, runs: bool = True) -> Watched:
    path = matrix_path(name)
    if not path.exists():
        raise InputError(name, "", "is neither a matrix file nor a shipped matrix", shipped_matrices())
    matrix = load_matrix(path)
    why = not_watchable(matrix.lane)
    if why and runs:
        raise InputError(path, "matrix.lane", why, WATCHED_LANES)
    if matrix.expectations_path is None:
        raise InputError(path, "matrix.expectations", "names no expectations file: there is nothing to watch against")
    expectations = load_expectations(matrix.expectations_path, matrix)
    if not expectations.releases:
        raise InputError(
            matrix.expectations_path,
            "expectations.releases",
            'records no release, so no release is new to it; list the releases it was observed on (["0.33.0"])',
        )
    newest = str(expectations.releases[-1])
    return Watched(matrix, expectations.for_release(newest), newest)


def _checked(args: argparse.Namespace) -> tuple[list[Watched], dict[str, Path]]:
    """Every option checked, before the index is asked or anything installed."""
    if args.workers < 0:
        raise InputError("-n", "", f"{args.workers} is not a number of workers (0 or more)")
    if args.recorded and not args.plan:
        raise InputError("--recorded", "", "only plans (--plan): recorded releases are not watched")
    watched = [_watched(name, runs=not args.recorded) for name in dict.fromkeys(args.lanes)]
    for release in [*args.release, *([args.nightly] if args.nightly else [])]:
        option = "--release" if release in args.release else "--nightly"
        if not release.strip():  # an empty name would install nothing and publish a delta for "vLLM "
            raise InputError(option, "", "an empty release: give a vLLM version (0.34.0) or a requirement for vLLM")
        try:
            parse_release(release)
        except ValueError:
            if not may_be_vllm(release):  # a wheel, a URL, vllm@commit: pip decides; another project: no
                problem = f"{release!r} is neither a vLLM version (0.34.0) nor a requirement for vLLM (a wheel URL)"
                raise InputError(option, "", problem) from None
    reports = {}
    for item in args.report:
        release, _, folder = item.partition("=")
        report = Path(folder) / "matrix.json" if folder and Path(folder).is_dir() else Path(folder)
        if not release or not report.is_file():
            raise InputError(
                "--report", "", f"{item!r} is not RELEASE=DIR of a lane report (a folder with matrix.json)"
            )
        _check_saved(report, release, watched)
        reports[release] = report
    if args.plan and reports:
        raise InputError("--plan", "", "plans runs; --report judges runs already made: give one of them")
    return watched, reports


def _check_saved(report: Path, release: str, watched: list[Watched]) -> None:
    """A saved report is read whole before anything runs, and must be the release it is labelled."""
    ran = report_release(report_document(report))  # a broken file stops here, one line naming it
    try:
        label = parse_release(release)
    except ValueError as error:
        raise InputError("--report", "", f"{release!r}: {error}") from None
    if ran is None:
        raise InputError(report, "runs", "names no single vLLM version: cannot tell which release it judges")
    try:
        same = parse_release(ran) == label
    except ValueError:
        same = False
    if not same:
        raise InputError(report, "runs.vllm_version", f"ran vLLM {ran}, not the {release} it is given as (--report)")
    for lane in watched:
        if label in lane.expectations.releases:
            where = lane.matrix.expectations_path or lane.matrix.path
            raise InputError("--report", "", f"vLLM {release} is already recorded in {where}: nothing new to judge")


def _releases(args: argparse.Namespace, watched: Watched, reports: dict[str, Path]) -> list[str]:
    """The releases to watch for one lane, newest first: given, or asked of the index (may raise RuntimeError)."""
    if reports:
        return list(reports)
    if args.recorded:
        return [watched.judged_as]
    if args.release:
        found = list(args.release)
    else:
        found = list(new_releases(offered_releases(), [str(v) for v in watched.expectations.releases]))
    return found + ([args.nightly] if args.nightly else [])


def run(args: argparse.Namespace) -> int:
    watched, reports = _checked(args)
    envs = release_envs(args, "bisect")  # bisect's and history's envs: one install serves all three
    try:
        jobs = [WatchJob(lane.lane, release) for lane in watched for release in _releases(args, lane, reports)]
    except RuntimeError as error:  # the index could not be asked: the harness could not do its job
        print(f"watch: {error}", file=sys.stderr)
        return 1
    if args.plan:
        print(json.dumps(job_plan(jobs)))
        return 0
    if not jobs:
        for lane in watched:
            print(f"watch: {lane.lane}: no release newer than {lane.judged_as} to watch; nothing to do")
        return 0
    out = writable_folder(Path(args.out), "--out")
    writable_folder(envs.root, "--cache")
    refuse_overlap([("--out", out)], [*(lane.matrix.path for lane in watched), *reports.values()])
    # One watch per --out at a time: a second would delete the first's running lane reports (run/).
    with locked(out, wait=False):
        return _watch_all(args, watched, jobs, envs, out, reports)


def _watch_all(
    args: argparse.Namespace,
    watched: list[Watched],
    jobs: list[WatchJob],
    envs: ReleaseEnvs,
    out: Path,
    reports: dict[str, Path],
) -> int:
    lanes = {lane.lane: lane for lane in watched}
    outcomes: list[dict[str, Any]] = []
    try:
        for job in jobs:
            outcomes.append(_watch_one(args, lanes[job.lane], job, envs, out, reports.get(job.release)))
    finally:
        if args.clean:
            envs.clean()
    summary = watch_markdown(outcomes)
    listing = (json.dumps({"jobs": outcomes}, indent=2) + "\n").encode()
    write_set({out / "watch.md": summary.encode("utf-8"), out / "watch.json": listing})
    append_step_summary(summary)
    failed = [outcome for outcome in outcomes if outcome["harness_failed"]]
    for outcome in outcomes:
        print(f"watch: {outcome['line']}")
    print(f"watch: wrote {out / 'watch.md'}")
    return 1 if failed else 0


def _install(release: str, envs: ReleaseEnvs) -> tuple[Path | None, list[InstallAttempt]]:
    """The release's env: as published first, then (if that fails and overrides are recorded for it)
    with them; every attempt is kept for the delta."""
    if release in envs.reuse:
        return envs.reuse[release], [InstallAttempt("reused env", "", True, str(envs.reuse[release]))]
    attempts: list[InstallAttempt] = []
    chosen = envs.overrides_for(release)
    tries: list[tuple[str, ReleaseEnvs]] = []
    if release in envs.explicit:  # the user chose the pins: that install only
        tries.append((chosen.describe() or "as published", envs))
    else:
        tries.append(("as published", dataclasses.replace(envs, explicit={**envs.explicit, release: ()})))
        if chosen.pins:
            tries.append((chosen.describe(), envs))
    for how, choice in tries:
        print(f"watch: installing {release} {how} ...", file=sys.stderr, flush=True)
        env = choice.env_for(release)
        if isinstance(env, EnvironmentFailure):
            attempts.append(InstallAttempt(how, " ".join(choice.overrides_for(release).pins), False, env.reason))
            continue
        attempts.append(InstallAttempt(how, " ".join(choice.overrides_for(release).pins), True, str(env)))
        return env, attempts
    return None, attempts


def _watch_one(
    args: argparse.Namespace, lane: Watched, job: WatchJob, envs: ReleaseEnvs, out: Path, saved: Path | None
) -> dict[str, Any]:
    folder = out / lane.lane / slug(job.release)
    started = time.monotonic()
    attempts: list[InstallAttempt] = []
    env = envs.reuse.get(job.release)  # a saved report's release may still have its env here (repro checks)
    if saved is None:
        env, attempts = _install(job.release, envs)
        if env is None:
            failure = EnvironmentFailure(job.release, INSTALL, attempts[-1].outcome)
            return _failed(lane, job, folder, attempts, failure, harness_failed=False, started=started)
        pytest_args = ["-k", args.keyword] if args.keyword else []
        print(f"watch: running {lane.lane} on {job.release} ...", file=sys.stderr, flush=True)
        saved = run_lane(
            env,
            lane.matrix.path.resolve(),
            folder / "run",
            envs.root,
            pytest_args,
            args.workers,
            emulated_generations(lane.matrix),
        )
        if saved is None:
            failure = EnvironmentFailure(job.release, LANE, f"the lane ended without writing matrix.json ({folder})")
            return _failed(lane, job, folder, attempts, failure, harness_failed=True, started=started)
    document = report_document(saved)
    run_info = (document.get("runs") or [document.get("run") or {}])[0]
    version = run_info.get("vllm_version") or job.release.removeprefix("vllm==")
    cells = expand(lane.matrix)
    failures = cell_failures(document, version, envs.symptoms(version))
    no_verdict = {cell: failure.reason for (_, cell), failure in failures.items()}
    changes, judged = changed_cells(document, cells, lane.expectations, no_verdict)
    if judged == 0:
        reason = next(iter(no_verdict.values()), "the report holds no cell of this matrix")
        failure = EnvironmentFailure(job.release, LANE, f"no cell gave a verdict: {reason}")
        return _failed(lane, job, folder, attempts, failure, harness_failed=False, started=started)
    groups = group_changes(changes, cells)
    after = patched(lane.expectations, groups, version)
    not_in_matrix = sorted(
        {
            str(name)
            for cell in document.get("cells") or []
            for name in (cell.get("details") or {}).get("backends_not_in_matrix", ())
        }
    )
    delta = ReleaseDelta(
        lane=lane.lane,
        matrix=str(lane.matrix.path),
        release=job.release,
        version=version,
        judged_as=lane.judged_as,
        cells=judged,
        groups=groups,
        no_verdict=tuple(sorted(no_verdict.items())),
        not_in_matrix=tuple(not_in_matrix),
        unsettled=tuple(unsettled(document, cells, after, no_verdict)),
    )
    repros = _repros(document, delta, folder, str(saved), env, args.no_repro_check)
    patch = patch_toml(delta, lane.expectations.rules)
    tried = [attempt.to_json() for attempt in attempts]
    files = {
        "delta.json": (
            json.dumps(
                delta_json(delta, tried, repros, str(saved), lane.expectations.rules),
                indent=2,
            )
            + "\n"
        ).encode(),
        "delta.md": delta_markdown(delta, tried, repros, patch, lane.expectations.rules).encode("utf-8"),
        "patch.toml": patch.encode("utf-8"),
    }
    _write_set(folder, files)
    line = (
        f"{lane.lane} on vLLM {job.release}: {delta.changed} of {delta.cells} cells changed from {lane.judged_as} "
        f"in {len(groups)} groups; {folder / 'delta.md'}"
    )
    return {
        "lane": lane.lane,
        "release": job.release,
        "version": version,
        "judged_as": lane.judged_as,
        "changed": delta.changed,
        "cells": delta.cells,
        "groups": len(groups),
        "unsettled": len(delta.unsettled),
        "delta": str(folder / "delta.json"),
        "install": [attempt.to_json() for attempt in attempts],
        "seconds": round(time.monotonic() - started, 1),
        "harness_failed": False,
        "line": line,
    }


def _failed(
    lane: Watched,
    job: WatchJob,
    folder: Path,
    attempts: Sequence[InstallAttempt],
    failure: EnvironmentFailure,
    *,
    harness_failed: bool,
    started: float,
) -> dict[str, Any]:
    """A release that gave no delta: named, with every install attempt, never dropped."""
    document = {
        "lane": lane.lane,
        "release": job.release,
        "judged_as": lane.judged_as,
        "no_delta": failure.to_json(),
        "install": [attempt.to_json() for attempt in attempts],
    }
    lines = [f"# {lane.lane} on vLLM {job.release}: no delta", "", f"- {failure.line()}"]
    lines += [f"- install {attempt.line()}" for attempt in attempts]
    files = {
        "delta.json": (json.dumps(document, indent=2) + "\n").encode(),
        "delta.md": ("\n".join(lines) + "\n").encode("utf-8"),
    }
    _write_set(folder, files)
    return {
        "lane": lane.lane,
        "release": job.release,
        "judged_as": lane.judged_as,
        "no_delta": failure.line(),
        "install": [attempt.to_json() for attempt in attempts],
        "delta": str(folder / "delta.json"),
        "seconds": round(time.monotonic() - started, 1),
        "harness_failed": harness_failed,
        "line": f"{lane.lane} on vLLM {job.release}: {failure.line()}",
    }


def _repros(
    document: dict[str, Any],
    delta: ReleaseDelta,
    folder: Path,
    source: str,
    env: Path | None,
    skip_check: bool,
) -> dict[int, dict[str, Any]]:
    """One script per group, for its representative cell, asserting the recorded release's answer:
    it exits 1 where the change shows. Run in the release's env when that is at hand."""
    runs = document.get("runs") or [document.get("run")]
    records = {str(cell.get("id")): cell for cell in document.get("cells") or []}
    found: dict[int, dict[str, Any]] = {}
    for group in delta.groups:
        cell = group.representative
        old = cell.old
        # The recorded release's expectation, as repro reads it (no finding: the change is the question).
        record = {
            **records[cell.id],
            "expected": old.verdict.value,
            "expected_message": old.message,
            "finding": None,
            "correct": None,
            # Same verdict, another reason: only the message tells the releases apart.
            "require_message": group.old == group.new,
        }
        path = folder / "repro" / f"{group.slug}.py"
        entry: dict[str, Any] = {"cell": cell.id, "script": str(path)}
        try:
            text = script_for({"runs": runs, "cells": [record]}, cell.id, source, path.name)
        except InputError as error:
            entry["written"] = False
            entry["why"] = error.line()
            found[group.number] = entry
            continue
        _write(path, text.encode("utf-8"))
        entry["written"] = True
        if env is not None and not skip_check:
            entry.update(_check_repro(env, path, group.new.value, cell.message))
        found[group.number] = entry
    return found


def _check_repro(env: Path, script: Path, new_verdict: str, new_message: str) -> dict[str, Any]:
    """Run a group's script on the release. It reproduces when it says so (its assertion of the
    recorded release's answer fails), or, for a cell that crashes, when the script itself dies of
    the cell's error (its observation, like the lane's, does not catch every exception vLLM raises)."""
    started = time.monotonic()
    done = run_owned(
        [str(env / "bin" / "python"), str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=900,
    )
    said = [line for line in done.stdout.splitlines() if line.startswith(("observed", "the observed", "FAILURE"))]
    raised = next((line for line in reversed(done.stderr.splitlines()) if line.strip()), "")
    if done.returncode == 2:  # the script cannot run here (no libcuda, no gcc): no answer either way
        return {"checked": False, "why": raised or "the script says it cannot run here"}
    asserted = "FAILURE REPRODUCES" in done.stdout
    same_crash = new_verdict == "crash" and bool(raised) and raised.strip()[:60] in new_message
    how = "asserted" if asserted else "raised the cell's error" if same_crash else "did not reproduce"
    return {
        "checked": True,
        "reproduces": asserted or same_crash,
        "how": how,
        "exit": done.returncode,
        "last_line": " | ".join(said) or raised or "(no output)",
        "seconds": round(time.monotonic() - started, 1),
    }


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)


def _write_set(folder: Path, files: dict[str, bytes]) -> None:
    """A release's delta files as one set: watch-issues reads delta.json and delta.md together."""
    folder.mkdir(parents=True, exist_ok=True)
    write_set({folder / name: data for name, data in files.items()})
