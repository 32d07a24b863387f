"""Benchmark: how long a lane env takes to build, with uv (tox-uv, the default) and with pip.

Issue 17's target: `tox -e cpu` and `tox -e selection` env creation with a warm package cache
in <= 0.3x of pip's time. Each env is built by `python3 toxw.py -e ENV --notest` (the README's
way) in a scratch work dir, first with empty package caches (cold), then again with the caches
that build left (warm); `--installers pip` builds it with tox's own virtualenv runner, which
installs with pip (`-x testenv.runner=virtualenv`). Every build happens in this one run,
one after another, each with the load average before and after; each env is deleted as soon as
it is timed (a vLLM env is 3.5-9.4 GB), and the scratch caches at the end.

    python benchmarks/bench_envs.py [--envs cpu selection] [--installers uv pip] [--scratch DIR]

Writes `envs.json` and `envs.md` under `--out` (default benchmarks/out/). Not part of `tox`:
it downloads every wheel of each lane (several GB) for each cold build.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGET_WARM_RATIO = 0.3


@dataclass(frozen=True)
class Build:
    env: str
    installer: str  # "uv" (tox-uv) or "pip" (tox's virtualenv runner)
    cache: str  # "cold" or "warm"
    seconds: float
    ok: bool
    load_before: float
    load_after: float


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def build(env: str, installer: str, cache: str, scratch: Path) -> Build:
    work = scratch / "work"
    shutil.rmtree(work, ignore_errors=True)
    caches = {"PIP_CACHE_DIR": str(scratch / "pip-cache"), "UV_CACHE_DIR": str(scratch / "uv-cache")}
    command = [sys.executable, str(ROOT / "toxw.py"), "--workdir", str(work), "-e", env, "--notest"]
    if installer == "pip":
        command += ["-x", "testenv.runner=virtualenv"]  # every env: they share one .pkg env
    load_before = _load()
    started = time.monotonic()
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **caches}, capture_output=True, text=True, check=False)
    seconds = round(time.monotonic() - started, 1)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-2000:] + done.stderr[-2000:])
    shutil.rmtree(work, ignore_errors=True)
    return Build(env, installer, cache, seconds, done.returncode == 0, load_before, _load())


def ratios(builds: Sequence[Build]) -> dict[str, float]:
    """uv's time over pip's, per env and cache state, where both builds succeeded."""
    times = {(b.env, b.installer, b.cache): b.seconds for b in builds if b.ok}
    out = {}
    for env, _, cache in times:
        uv, pip = times.get((env, "uv", cache)), times.get((env, "pip", cache))
        if uv is not None and pip:
            out[f"{env} {cache}: uv / pip"] = round(uv / pip, 2)
    return out


def markdown(builds: Sequence[Build], found: dict[str, float]) -> str:
    lines = ["| env | installer | cache | seconds | load before / after |", "|---|---|---|---|---|"]
    for b in builds:
        seconds = f"{b.seconds:.1f}" if b.ok else f"{b.seconds:.1f} (failed)"
        lines.append(f"| {b.env} | {b.installer} | {b.cache} | {seconds} | {b.load_before} / {b.load_after} |")
    lines += ["", "| ratio | measured | target |", "|---|---|---|"]
    for name, value in found.items():
        target = f"<= {TARGET_WARM_RATIO}x" if "warm" in name else "-"
        lines.append(f"| {name} | {value:.2f}x | {target} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["cpu", "selection"])
    parser.add_argument("--installers", nargs="+", choices=["uv", "pip"], default=["uv", "pip"])
    parser.add_argument("--scratch", type=Path, help="where the caches and envs go (default: a temporary folder)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out")
    args = parser.parse_args(argv)
    if args.scratch is not None:
        args.scratch.mkdir(parents=True, exist_ok=True)
    builds: list[Build] = []
    for env in args.envs:
        for installer in args.installers:
            scratch = Path(tempfile.mkdtemp(prefix=f"bench-envs-{env}-{installer}-", dir=args.scratch))
            try:
                for cache in ("cold", "warm"):
                    builds.append(build(env, installer, cache, scratch))
                    print(json.dumps(asdict(builds[-1])), flush=True)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
    found = ratios(builds)
    args.out.mkdir(parents=True, exist_ok=True)
    record = {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "builds": [asdict(b) for b in builds],
        "ratios": found,
    }
    (args.out / "envs.json").write_text(json.dumps(record, indent=2) + "\n")
    (args.out / "envs.md").write_text(markdown(builds, found))
    print(markdown(builds, found))
    return 0 if all(b.ok for b in builds) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
