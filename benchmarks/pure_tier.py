"""The pure test tier's time (``pytest -m pure``), this tree against another revision, in one run.

Both trees run in this interpreter's env, alternating (``--rounds``) so that load drifts hit both
alike; the other revision is checked out in a temporary git worktree and put first on
``PYTHONPATH``. Each run's wall time and CPU time (user + system of pytest and its workers) are
printed, then the medians and the ratios this/other. CPU time is the figure that survives a
loaded machine; wall time is what the tier's "under 10 s" target is about.

    python -m benchmarks.pure_tier --against ec70293 [--rounds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(tree: Path, workers: int) -> tuple[float, float]:
    """One ``pytest -m pure`` in ``tree``: (wall seconds, CPU seconds of the children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "pure"]
    if workers:
        command += ["-n", str(workers)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"pytest -m pure failed in {tree} (exit {done.returncode}):\n{done.stdout[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers (0: serial)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="pure-tier-") as folder:
        other = Path(folder) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(other), args.against], cwd=ROOT, check=True)
        try:
            figures: dict[str, list[tuple[float, float]]] = {"this": [], args.against: []}
            print(f"load average at start: {os.getloadavg()[0]:.1f}")
            for round_ in range(args.rounds):
                for name, tree in (("this", ROOT), (args.against, other)):
                    wall, cpu = _run(tree, args.workers)
                    figures[name].append((wall, cpu))
                    print(f"round {round_ + 1} {name:>12}: {wall:6.1f} s wall {cpu:6.1f} s CPU")
            print(f"load average at end: {os.getloadavg()[0]:.1f}")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(other)], cwd=ROOT, check=False)

    medians = {name: tuple(statistics.median(f[i] for f in runs) for i in (0, 1)) for name, runs in figures.items()}
    for name, (wall, cpu) in medians.items():
        print(f"median {name:>12}: {wall:6.1f} s wall {cpu:6.1f} s CPU")
    this, that = medians["this"], medians[args.against]
    print(f"ratio this/{args.against}: wall {this[0] / that[0]:.2f}, CPU {this[1] / that[1]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
