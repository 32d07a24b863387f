"""Benchmark: what the harness costs per cell, against the work a cell cannot avoid.

Each lane runs in its own venv, so each has a subcommand (``tox -e bench`` runs ``cpu``,
``tox -e bench-selection`` runs ``selection``). Every figure comes from runs made by the
same invocation, one after another, on the same machine; ratios are printed and written
as JSON and Markdown to ``--out`` (default ``benchmarks/out/``, git-ignored).

cpu (issue 8 targets, and issue 3's):
  * the harness runs the cells through pytest and the matrix plugin at ``-n 0``, with
    timers (``benchmarks.stage_timers``) around model init, weight load, forward passes
    and comparison in the cell process. Per cell: the item's wall time (runner, pipe,
    verdict, journal included) over that cell's irreducible work. Target <= 3x.
  * the bare script (``benchmarks.bare_cpu``) runs the same cells with only the vLLM
    calls, in one process. Per-cell median, harness over bare. Target <= 1.25x.
  * the same cells at ``-n 0`` and ``-n 2`` (whole pytest processes, start-up included).
    Target: -n 2 at least 1.6x faster.
  * ``--suite``: the lane's whole test session as ``tox -e cpu`` runs it (matrix, reference
    and planted-fault tests; e2e left out) at ``-n 0`` and ``-n 2``.
  * ``--profile``: one more ``-n 0`` run with cProfile in the cell process, summarised
    by where the time of a warm cell goes.
  * ``--cold``: the ``-n 0`` and ``-n 2`` runs again with every cell process spawned cold
    (``DFLASH_MATRIX_START=spawn``, the runner before the warm parent).
  * ``--startup``: ``benchmarks.startup``: a new and a replaced (planted-crash) process's first
    cell, spawned against forked by the warm parent, alternating. Target: replaced <= 0.1x of
    the cold first cell.
selection (issue 8 and 4):
  * per process key (capability x FlashInfer cubin), the whole pytest process running
    that key's cells at ``-n 0`` against the whole bare process (``benchmarks.bare_selection``)
    making the same selection calls. Target <= 1.5x.
  * the chosen keys as one run at ``-n 2 --dist loadgroup`` (keys spread over the workers)
    against the sum of the bare scripts (issue 4's form of the target).
  * ``--cold``: that run again with every cell process spawned cold; target (issue 17): the
    warm run <= 0.5x of it. ``--no-per-key`` leaves out the per-key runs.

The first cell of each cell process pays for vLLM's import and the process's set-up; it
is reported as start-up and left out of the per-cell medians on both sides.
Timings on a shared machine are noisy: the load average is recorded beside each run.

    python -m benchmarks.bench_lanes cpu [--cells N] [--workers 2] [--suite] [--profile] [--cold] [--startup]
    python -m benchmarks.bench_lanes selection [--keys sm90-cubin sm100-nocubin] [--workers 2] [--cold] [--no-per-key]
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.stage_timers import DETAILS_KEY, irreducible_s
from harness.matrix import expand, load_matrix
from harness.runner.supervisor import START_VARIABLE

ROOT = Path(__file__).resolve().parents[1]
CPU_TARGETS = {"cost_vs_irreducible": 3.0, "harness_vs_bare": 1.25, "speedup_n2": 1.6}
SELECTION_TARGET = 1.5


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@dataclass
class Run:
    """One timed subprocess: its wall time and the load average around it."""

    name: str
    wall_s: float
    load_before: float
    load_after: float
    returncode: int
    log: Path


def _timed(name: str, command: Sequence[str], folder: Path, extra_env: dict[str, str] | None = None) -> Run:
    log = folder / f"{name}.log"
    env = {**_environment(), **(extra_env or {})}
    before = _load()
    started = time.perf_counter()
    with log.open("w") as handle:
        code = subprocess.run(command, cwd=ROOT, env=env, stdout=handle, stderr=subprocess.STDOUT).returncode
    run = Run(name, time.perf_counter() - started, before, _load(), code, log)
    print(f"  {name}: {run.wall_s:.1f} s (load {before} -> {run.load_after}, exit {code})", flush=True)
    return run


@dataclass
class HarnessRun:
    run: Run
    item_s: dict[str, float]
    cells: list[dict[str, Any]]  # journal cell records
    first: set[str] = field(default_factory=set)  # each cell process's first cell

    @property
    def warm(self) -> list[dict[str, Any]]:
        return [cell for cell in self.cells if cell["id"] not in self.first]

    def problems(self) -> list[str]:
        return [
            f"{c['id']}: {c['outcome']} ({c['verdict']}, expected {c['expected']})"
            for c in self.cells
            if c["outcome"] != "match"
        ]


def _harness(
    name: str, matrix: Path, cells: Sequence[str], folder: Path, extra: Sequence[str], env: dict[str, str] | None = None
) -> HarnessRun:
    listing = folder / f"{name}.cells"
    listing.write_text("\n".join(cells))
    times = folder / f"{name}.times.json"
    reports = folder / f"{name}-reports"
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "benchmarks.timing_plugin",
        "--bench-cells",
        str(listing),
        "--bench-times",
        str(times),
        "--matrix",
        str(matrix),
        "--report-dir",
        str(reports),
        str(matrix),
        "-q",
        "-p",
        "no:cacheprovider",
        *extra,
    ]
    run = _timed(name, command, folder, env)
    if run.returncode not in (0, 1) or not times.exists():
        raise SystemExit(f"bench: {name} did not run (exit {run.returncode}); see {run.log}")
    records, first = [], set()
    for journal in sorted((reports / "journal").glob("*.jsonl")):
        cells_here = [json.loads(line)["cell"] for line in journal.read_text().splitlines() if '"kind": "cell"' in line]
        records.extend(cells_here)
        if cells_here:
            first.add(cells_here[0]["id"])
    return HarnessRun(run, json.loads(times.read_text()), records, first)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _verdict(value: float, target: float, at_most: bool) -> str:
    return "yes" if (value <= target if at_most else value >= target) else "NO"


# -- cpu ---------------------------------------------------------------------------------

_PROFILE_BUCKETS: dict[str, tuple[tuple[str, str], ...]] = {
    "config: EngineArgs.create_engine_config": (("vllm/engine/arg_utils.py", "create_engine_config"),),
    "select + claim": (
        ("harness/attention/draft.py", "platform_choice"),
        ("harness/attention/draft.py", "backend_claim"),
    ),
    "model build: vLLM load_model": (("model_loader/base_loader.py", "load_model"),),
    "  of which model init": (("model_loader/base_loader.py", "create_model"),),
    "  of which weight load": (
        ("model_loader/default_loader.py", "load_weights"),
        ("model_loader/utils.py", "process_weights_after_loading"),
    ),
    "  of which gc.collect": (("~", "<built-in method gc.collect>"),),
    "forward: metadata, cache, kernel": (
        ("harness/attention/paged.py", "run_eager"),
    ),
    "compare: fp32 reference": (("harness/attention/reference.py", "reference_attention"),),
}
_TOP_LEVEL = (
    "config: EngineArgs.create_engine_config",
    "select + claim",
    "model build: vLLM load_model",
    "forward: metadata, cache, kernel",
    "compare: fp32 reference",
)


def summarise_profile(path: Path, cells: int) -> dict[str, Any]:
    """Seconds per warm cell in each bucket (cumulative time of the named functions)."""
    stats = pstats.Stats(str(path))
    table: dict[str, float] = {}
    for bucket, functions in _PROFILE_BUCKETS.items():
        table[bucket] = sum(
            entry[3]
            for (filename, _, function), entry in stats.stats.items()  # type: ignore[attr-defined]
            if any(filename.endswith(suffix) and function == name for suffix, name in functions)
        )
    total = stats.total_tt  # type: ignore[attr-defined]
    table["other (harness's own work, vLLM calls not named above)"] = total - sum(table[b] for b in _TOP_LEVEL)
    per_cell = {bucket: seconds / cells for bucket, seconds in table.items()}
    top = sorted(stats.stats.items(), key=lambda item: -item[1][2])[:12]  # type: ignore[attr-defined]
    return {
        "cells": cells,
        "per_cell_s": {"total (profiled)": total / cells, **per_cell},
        "top_self_time_s": [
            {"function": f"{Path(filename).name}:{line}({function})", "self_s_per_cell": entry[2] / cells}
            for (filename, line, function), entry in top
        ],
    }


def bench_cpu(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    matrix_path: Path = args.matrix
    matrix = load_matrix(matrix_path)
    every = [cell.id for cell in expand(matrix)]
    chosen = (
        every if args.cells is None else sorted(random.Random(args.seed).sample(every, min(args.cells, len(every))))
    )
    work = out / "cpu"
    work.mkdir(parents=True, exist_ok=True)
    print(f"cpu lane: {len(chosen)} of {len(every)} cells of {matrix_path}", flush=True)
    plant = ["--plant", "benchmarks.stage_timers:install"]

    listing = work / "bare.cells"
    listing.write_text("\n".join(chosen))
    bare_json = work / "bare.json"
    bare_command = [
        sys.executable,
        "-m",
        "benchmarks.bare_cpu",
        "--matrix",
        str(matrix_path),
        "--cells",
        str(listing),
        "--out",
        str(bare_json),
    ]
    bare_run = _timed("bare", bare_command, work)
    if bare_run.returncode != 0:
        raise SystemExit(f"bench: the bare cpu script failed; see {bare_run.log}")
    bare = json.loads(bare_json.read_text())
    serial = _harness("harness-n0", matrix_path, chosen, work, plant)
    parallel = _harness(
        f"harness-n{args.workers}", matrix_path, chosen, work, [*plant, "-n", str(args.workers), "--dist", "loadgroup"]
    )
    cold = {}
    if args.cold:
        # The same two runs with every cell process spawned cold (the runner before the warm parent).
        for name, extra in (("n0", []), (f"n{args.workers}", ["-n", str(args.workers), "--dist", "loadgroup"])):
            cold[name] = _harness(f"harness-{name}-spawn", matrix_path, chosen, work, [*plant, *extra], env=SPAWN).run

    warm = serial.warm
    cost = [serial.item_s[c["id"]] for c in warm]
    irreducible = [irreducible_s(c["details"].get(DETAILS_KEY, {}), c["details"].get("timings_s", {})) for c in warm]
    lane = [c["duration_s"] for c in warm]
    bare_warm = bare["cells"][1:]
    ratios = [c / i for c, i in zip(cost, irreducible, strict=True) if i > 0]
    result: dict[str, Any] = {
        "cells": len(chosen),
        "warm_cells": len(warm),
        "ratios": {
            "cost_vs_irreducible": _median(ratios),
            "cost_vs_irreducible_of_medians": _median(cost) / _median(irreducible),
            "harness_vs_bare": _median(cost) / _median([c["wall_s"] for c in bare_warm]),
            "speedup_n2": serial.run.wall_s / parallel.run.wall_s,
            **({"speedup_n2_spawn": cold["n0"].wall_s / cold[f"n{args.workers}"].wall_s} if cold else {}),
        },
        "targets": CPU_TARGETS,
        "per_cell_s": {
            "harness_item_median": _median(cost),
            "lane_observe_median": _median(lane),
            "runner_and_pytest_median": _median([s - d for s, d in zip(cost, lane, strict=True)]),
            "irreducible_median": _median(irreducible),
            "bare_median": _median([c["wall_s"] for c in bare_warm]),
            "bare_irreducible_median": _median([c["irreducible_s"] for c in bare_warm]),
        },
        "startup_s": {
            "harness_first_cell": [serial.item_s[name] for name in sorted(serial.first)],
            "bare_setup_and_first_cell": bare["setup_s"] + bare["cells"][0]["wall_s"],
        },
        "runs": {r.name: vars(r) | {"log": str(r.log)} for r in (bare_run, serial.run, parallel.run, *cold.values())},
        "problems": serial.problems() + parallel.problems(),
    }
    if args.startup:
        result["startup"] = bench_startup(matrix_path, work)
    if args.suite:
        result["suite"] = bench_suite(matrix_path, work, args.workers)
    if args.profile:
        profile = work / "cell.prof"
        profiled = _harness(
            "harness-n0-profiled",
            matrix_path,
            chosen,
            work,
            ["--plant", "benchmarks.cell_profile:install"],
            env={"DFLASH_BENCH_PROFILE": str(profile)},
        )
        result["profile"] = summarise_profile(profile, len(profiled.warm))
    return result


SPAWN = {START_VARIABLE: "spawn"}


def bench_startup(matrix_path: Path, work: Path) -> dict[str, Any]:
    """Time to a new and a replaced cell process's first cell, spawned vs forked (``startup.py``)."""
    out = work / "startup.json"
    command = [sys.executable, "-m", "benchmarks.startup", "--matrix", str(matrix_path), "--out", str(out)]
    run = _timed("startup", command, work)
    if run.returncode != 0:
        raise SystemExit(f"bench: the start-up benchmark failed; see {run.log}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def startup_markdown(startup: dict[str, Any]) -> list[str]:
    median, ratios = startup["median_s"], startup["ratios_to_cold_first"]
    lines = [
        "",
        "Time to a cell process's first result (median of the rounds; spawn = cold, warm = forked by the "
        f"warm parent), load average {startup['load']}:",
        "",
        "| step | spawn | warm | warm / spawn's first cell | met (<= 0.1x) |",
        "|---|---|---|---|---|",
    ]
    for step in median["warm"]:
        ratio = ratios[f"warm {step}"]
        met = _verdict(ratio, 0.1, True) if step in ("replaced", "new key") else ""
        spawn, warm = median["spawn"][step], median["warm"][step]
        lines.append(f"| {step} | {spawn:.2f} s | {warm:.2f} s | {ratio:.3f}x | {met} |")
    return lines


SUITE_TESTS = ("tests/attention", "tests/cpu_lane")


def bench_suite(matrix_path: Path, work: Path, workers: int) -> dict[str, Any]:
    """What `tox -e cpu` runs, e2e group left out: the matrix plus the lane's tests, whose
    planted-fault and determinism runs each start a cell process of their own."""
    walls = {}
    for count in (0, workers):
        command = [
            sys.executable,
            "-m",
            "pytest",
            *SUITE_TESTS,
            "-m",
            "not e2e",
            "--matrix",
            str(matrix_path),
            "--report-dir",
            str(work / f"suite-n{count}-reports"),
            "-q",
            "-p",
            "no:cacheprovider",
            "--durations=15",
            "-n",
            str(count),
            *(["--dist", "loadgroup"] if count else []),
        ]
        run = _timed(f"suite-n{count}", command, work)
        walls[f"n{count}"] = vars(run) | {"log": str(run.log)}
    return {
        "tests": [*SUITE_TESTS, "-m not e2e", "matrix"],
        "runs": walls,
        "speedup": walls["n0"]["wall_s"] / walls[f"n{workers}"]["wall_s"],
    }


def cpu_markdown(result: dict[str, Any]) -> str:
    r, t, p = result["ratios"], result["targets"], result["per_cell_s"]
    lines = [
        f"## cpu lane: {result['cells']} cells ({result['warm_cells']} warm at -n 0)",
        "",
        "| measure | measured | target | met |",
        "|---|---|---|---|",
        f"| median per-cell cost / irreducible work | {r['cost_vs_irreducible']:.2f}x | <= {t['cost_vs_irreducible']}x "
        f"| {_verdict(r['cost_vs_irreducible'], t['cost_vs_irreducible'], True)} |",
        f"| median per-cell cost / bare build+forward | {r['harness_vs_bare']:.2f}x | <= {t['harness_vs_bare']}x "
        f"| {_verdict(r['harness_vs_bare'], t['harness_vs_bare'], True)} |",
        f"| wall -n 0 / wall -n 2 | {r['speedup_n2']:.2f}x | >= {t['speedup_n2']}x "
        f"| {_verdict(r['speedup_n2'], t['speedup_n2'], False)} |",
        *(
            [f"| wall -n 0 / wall -n 2, cell processes spawned (before) | {r['speedup_n2_spawn']:.2f}x | | |"]
            if "speedup_n2_spawn" in r
            else []
        ),
        "",
        "| per warm cell (median) | time |",
        "|---|---|",
        *(f"| {name.replace('_', ' ')} | {_ms(seconds)} |" for name, seconds in p.items()),
        "",
        "| run | wall | load average before -> after |",
        "|---|---|---|",
        *(
            f"| {name} | {run['wall_s']:.1f} s | {run['load_before']} -> {run['load_after']} |"
            for name, run in result["runs"].items()
        ),
    ]
    if "suite" in result:
        suite = result["suite"]
        lines += [
            "",
            "The lane's whole test session as `tox -e cpu` runs it, e2e left out:",
            "",
            "| run | wall | load average before -> after | pytest exit |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {name} | {run['wall_s']:.1f} s | {run['load_before']} -> {run['load_after']} | {run['returncode']} |"
            for name, run in suite["runs"].items()
        ]
        lines.append(
            f"| speedup | {suite['speedup']:.2f}x | target >= {t['speedup_n2']}x: "
            f"{_verdict(suite['speedup'], t['speedup_n2'], False)} | |"
        )
    if "startup" in result:
        lines += startup_markdown(result["startup"])
    if "profile" in result:
        profiled = result["profile"]["cells"]
        lines += [
            "",
            f"cProfile of {profiled} warm cells in the cell process (it inflates Python-heavy parts):",
            "",
            "| where a warm cell's time goes | per cell |",
            "|---|---|",
        ]
        lines += [f"| {name} | {_ms(seconds)} |" for name, seconds in result["profile"]["per_cell_s"].items()]
    if result["problems"]:
        lines += ["", f"**{len(result['problems'])} cells did not match their expectation** (timings still listed):"]
        lines += [f"- {problem}" for problem in result["problems"][:20]]
    return "\n".join(lines) + "\n"


# -- selection ---------------------------------------------------------------------------


def per_key_rows(
    matrix_path: Path, keys: Sequence[str], by_key: dict[str, list[str]], work: Path, bare_command: Any
) -> list[dict[str, Any]]:
    # Untimed: a fresh env's first vLLM process inspects each model class in a subprocess
    # (seconds) and caches the answer; neither side should be measured paying for that.
    print("selection lane: warm-up", flush=True)
    _timed("warm-up", bare_command(keys[0], work / "warm-up.json"), work)
    rows = []
    for key in keys:
        print(f"selection lane: {key}, {len(by_key[key])} cells", flush=True)
        bare_json = work / f"bare-{key}.json"
        bare_run = _timed(f"bare-{key}", bare_command(key, bare_json), work)
        if bare_run.returncode != 0:
            raise SystemExit(f"bench: the bare selection script failed for {key}; see {bare_run.log}")
        bare = json.loads(bare_json.read_text())
        harness = _harness(f"harness-{key}", matrix_path, by_key[key], work, [])
        warm = harness.warm
        rows.append(
            {
                "key": key,
                "cells": len(by_key[key]),
                "bare_wall_s": bare_run.wall_s,
                "harness_wall_s": harness.run.wall_s,
                "ratio": harness.run.wall_s / bare_run.wall_s,
                "bare_setup_s": bare["setup_s"],
                "bare_cell_median_s": _median([c["wall_s"] for c in bare["cells"][1:]]),
                "harness_item_median_s": _median([harness.item_s[c["id"]] for c in warm]),
                "harness_first_cell_s": [harness.item_s[name] for name in sorted(harness.first)],
                "load": [bare_run.load_before, harness.run.load_after],
                "problems": harness.problems(),
            }
        )
    return rows


def bench_selection(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    matrix_path: Path = args.matrix
    matrix = load_matrix(matrix_path)
    by_key: dict[str, list[str]] = {}
    for cell in expand(matrix):
        by_key.setdefault(matrix.process_key(cell), []).append(cell.id)
    keys = args.keys or sorted(by_key)
    unknown = [key for key in keys if key not in by_key]
    if unknown:
        valid = ", ".join(sorted(by_key))
        raise SystemExit(f"bench: {matrix_path}: no cells have process key(s) {', '.join(unknown)} (valid: {valid})")
    work = out / "selection"
    work.mkdir(parents=True, exist_ok=True)

    def bare_command(key: str, out: Path) -> list[str]:
        return [sys.executable, "-m", "benchmarks.bare_selection", "--matrix", str(matrix_path), "--key", key,
                "--out", str(out)]  # fmt: skip

    rows = [] if args.no_per_key else per_key_rows(matrix_path, keys, by_key, work, bare_command)
    total_bare = sum(row["bare_wall_s"] for row in rows)
    total_harness = sum(row["harness_wall_s"] for row in rows)
    result: dict[str, Any] = {"keys": rows, "target": SELECTION_TARGET}
    if rows:
        result["ratio_total"] = total_harness / total_bare
    if args.workers:
        # Issue 4's form: the chosen keys as one lane run, keys spread over xdist workers.
        cells = [cell for key in keys for cell in by_key[key]]
        whole = _harness(
            f"harness-n{args.workers}", matrix_path, cells, work, ["-n", str(args.workers), "--dist", "loadgroup"]
        )
        result["whole_lane"] = {
            "workers": args.workers,
            "wall_s": whole.run.wall_s,
            "ratio_to_sum_of_bare": whole.run.wall_s / total_bare if rows else None,
            "load": [whole.run.load_before, whole.run.load_after],
            "problems": whole.problems(),
        }
        if args.cold:
            # The same run with every cell process spawned cold: the runner before the warm parent.
            extra = ["-n", str(args.workers), "--dist", "loadgroup"]
            cold = _harness(f"harness-n{args.workers}-spawn", matrix_path, cells, work, extra, env=SPAWN)
            result["whole_lane"] |= {
                "spawn_wall_s": cold.run.wall_s,
                "warm_over_spawn": whole.run.wall_s / cold.run.wall_s,
                "spawn_load": [cold.run.load_before, cold.run.load_after],
                "spawn_problems": cold.problems(),
            }
    return result


def selection_markdown(result: dict[str, Any]) -> str:
    target = result["target"]
    lines = ["## selection lane"]
    if result["keys"]:
        lines += [
            "",
            "Harness (-n 0, whole pytest process) / bare script, per process key:",
            "",
            "| key | cells | bare | harness | ratio | met (<= 1.5x) | cell median bare / harness | load |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for row in result["keys"]:
        lines.append(
            f"| {row['key']} | {row['cells']} | {row['bare_wall_s']:.1f} s | {row['harness_wall_s']:.1f} s "
            f"| {row['ratio']:.2f}x | {_verdict(row['ratio'], target, True)} "
            f"| {_ms(row['bare_cell_median_s'])} / {_ms(row['harness_item_median_s'])} "
            f"| {row['load'][0]} -> {row['load'][1]} |"
        )
    if "ratio_total" in result:
        total = result["ratio_total"]
        lines.append(f"| all | | | | {total:.2f}x | {_verdict(total, target, True)} | | |")
    if "whole_lane" in result:
        whole = result["whole_lane"]
        ratio = whole["ratio_to_sum_of_bare"]
        to_bare = (
            f", {ratio:.2f}x the sum of the bare scripts (<= {target}x: {_verdict(ratio, target, True)})"
            if ratio is not None
            else ""
        )
        lines += [
            "",
            f"The same keys as one run with -n {whole['workers']} --dist loadgroup: {whole['wall_s']:.1f} s "
            f"(load {whole['load'][0]} -> {whole['load'][1]}){to_bare}.",
        ]
        if "spawn_wall_s" in whole:
            over = whole["warm_over_spawn"]
            lines.append(
                f"With every cell process spawned cold (before): {whole['spawn_wall_s']:.1f} s (load "
                f"{whole['spawn_load'][0]} -> {whole['spawn_load'][1]}); warm / spawn {over:.2f}x "
                f"(<= 0.5x: {_verdict(over, 0.5, True)})."
            )
    whole_lane = result.get("whole_lane", {})
    problems = [p for row in result["keys"] for p in row["problems"]]
    problems += whole_lane.get("problems", []) + whole_lane.get("spawn_problems", [])
    if problems:
        lines += ["", f"**{len(problems)} cells did not match their expectation** (timings still listed):"]
        lines += [f"- {problem}" for problem in problems[:20]]
    return "\n".join(lines) + "\n"


# -- entry point -------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out", help="JSON and Markdown go here")
    lanes = parser.add_subparsers(dest="lane", required=True)
    cpu = lanes.add_parser("cpu", help="cpu lane: cost per cell, bare baseline, -n 0 vs -n 2")
    cpu.add_argument("--matrix", type=Path, default=ROOT / "matrices" / "cpu.toml")
    cpu.add_argument("--cells", type=int, help="a random sample of this many cells (default: every cell)")
    cpu.add_argument("--seed", type=int, default=0, help="seed of the sample")
    cpu.add_argument("--workers", type=int, default=2, help="xdist workers of the parallel run")
    cpu.add_argument("--profile", action="store_true", help="one more -n 0 run under cProfile, summarised")
    cpu.add_argument("--suite", action="store_true", help="also time the lane's tests with the matrix at -n 0 and -n 2")
    cpu.add_argument("--cold", action="store_true", help="also run -n 0 and -n 2 with cell processes spawned (before)")
    cpu.add_argument("--startup", action="store_true", help="time a new and a replaced process's first cell")
    selection = lanes.add_parser("selection", help="selection lane: harness vs bare script per process key")
    selection.add_argument("--matrix", type=Path, default=ROOT / "matrices" / "selection.toml")
    selection.add_argument("--keys", nargs="+", help="process keys to run (default: all), e.g. sm90-cubin")
    selection.add_argument(
        "--workers", type=int, default=2, help="also run the chosen keys as one lane run with this many workers (0: no)"
    )
    selection.add_argument("--cold", action="store_true", help="also run that lane run with cell processes spawned")
    selection.add_argument("--no-per-key", action="store_true", help="skip the per-key harness and bare runs")
    args = parser.parse_args(argv)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    header = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": len(os.sched_getaffinity(0)),
        "load_at_start": _load(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "unset (the runner gives each cell process 1)"),
    }
    if args.lane == "cpu":
        result = {**header, **bench_cpu(args, out)}
        markdown = cpu_markdown(result)
    else:
        result = {**header, **bench_selection(args, out)}
        markdown = selection_markdown(result)
    markdown = f"{markdown}\n{header['at']}, {header['cores']} cores, load average at start {header['load_at_start']}\n"
    (out / f"{args.lane}.json").write_text(json.dumps(result, indent=1, default=str))
    (out / f"{args.lane}.md").write_text(markdown)
    print()
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
