"""How long a cell process takes to reach its first result: cold (spawned, imports paid
again) against warm (forked by the runner's warm parent), in one run, alternating.

Per start method, one ``CellRunner`` runs, in order:

* ``first``: the first cell of the run's first process (the warm parent's preload included);
* ``warm cell``: a second cell in that process, the work a cell cannot avoid;
* ``crash``: a cell planted to die with SIGSEGV (``crash_planted``);
* ``replaced``: the next cell, in the process that replaces the crashed one;
* ``new key``: where the matrix has a second process key, its first cell (a new process).

Each figure is the cell's wall time in the runner (``CellRunner.run``, start-up included).
The start methods alternate (``--rounds``) so that load drifts hit both alike.

    python -m benchmarks.startup --matrix matrices/cpu.toml --out startup.json [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.lanes.protocol import Lane
from harness.matrix import Cell, expand, load_matrix
from harness.runner import supervisor
from harness.runner.supervisor import CellRunner

CRASH_VARIABLE = "DFLASH_BENCH_CRASH"
STEPS = ("first", "warm cell", "crash", "replaced", "new key")


def crash_planted(lane: Lane) -> None:
    """Plant: the cell named by DFLASH_BENCH_CRASH kills its process with SIGSEGV, as a kernel can."""
    observe = lane.observe
    crash = os.environ.get(CRASH_VARIABLE)

    def observe_or_crash(cell: Cell, stage_log: Any) -> Any:
        if cell.id == crash:
            os.kill(os.getpid(), signal.SIGSEGV)
        return observe(cell, stage_log)

    lane.observe = observe_or_crash  # type: ignore[method-assign]


def _cells(path: Path) -> list[Cell]:
    """Four cells of the first process key, and the first cell of another key if there is one."""
    matrix = load_matrix(path)
    cells = expand(matrix)
    first_key = matrix.process_key(cells[0])
    same = [cell for cell in cells if matrix.process_key(cell) == first_key][:4]
    other = [cell for cell in cells if matrix.process_key(cell) != first_key][:1]
    if len(same) < 4:
        raise SystemExit(f"startup: {path} needs 4 cells of one process key")
    return same + other


def one_round(path: Path, method: str) -> dict[str, float]:
    cells = _cells(path)
    os.environ[supervisor.START_VARIABLE] = method
    os.environ[CRASH_VARIABLE] = cells[2].id
    runner = CellRunner(load_matrix(path), plants=[f"{__name__}:crash_planted"])
    times: dict[str, float] = {}
    try:
        for step, cell in zip(STEPS, cells, strict=False):
            started = time.perf_counter()
            observation = runner.run(cell)
            times[step] = time.perf_counter() - started
            died = observation.failure is not None and observation.failure.error_type == "ProcessDied"
            if (step == "crash") != died:
                raise SystemExit(f"startup: {step} cell {cell.id} gave {observation.failure}")
    finally:
        runner.close()
    return times


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matrix", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of spawn then warm")
    args = parser.parse_args(argv)
    rounds: dict[str, list[dict[str, float]]] = {"spawn": [], "warm": []}
    loads = [os.getloadavg()[0]]
    for number in range(args.rounds):
        for method in ("spawn", "warm"):
            times = one_round(args.matrix, method)
            rounds[method].append(times)
            loads.append(os.getloadavg()[0])
            shown = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in times.items())
            print(f"  round {number + 1} {method}: {shown} (load {loads[-1]:.2f})", flush=True)
    median = {
        method: {step: statistics.median(r[step] for r in runs) for step in runs[0]} for method, runs in rounds.items()
    }
    cold_first = median["spawn"]["first"]
    result = {
        "matrix": str(args.matrix),
        "rounds": rounds,
        "median_s": median,
        "ratios_to_cold_first": {
            f"{method} {step}": seconds / cold_first
            for method, steps in median.items()
            for step, seconds in steps.items()
        },
        "load": [round(load, 2) for load in loads],
    }
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
