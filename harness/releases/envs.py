"""One venv per vLLM release, built on demand, reused, and bounded in number (each holds a
whole vLLM and its CUDA torch: gigabytes, benchmarks/README.md).

Used by ``dflash-matrix bisect`` and ``history``: each release is installed once
(``harness/releases/install.py``, so torch is the CUDA build the release pins, with the overrides
recorded for the release unless one is given for it), the requested cells run there through
``dflash-matrix run`` with this harness on ``PYTHONPATH``, and the least recently used env is
deleted before a new one would exceed ``keep``. An env counts as built only once its marker
file is written after a successful install: an interrupted build is deleted, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import venv
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.releases.bisection import Answers
from harness.releases.environment import INSTALL, LANE, EnvironmentFailure, cell_failure
from harness.releases.install import (
    NO_OVERRIDES,
    OVERRIDES_VARIABLE,
    OverrideChoice,
    RecordedOverride,
    choose_overrides,
    python_version,
)
from harness.releases.processes import run_owned

INSTALLER = Path(__file__).resolve().with_name("install.py")
HARNESS = Path(__file__).resolve().parents[1]  # the harness package the lane envs run
COMPLETE = ".dflash-complete"
# What `dflash-matrix run` needs beside vLLM (pyproject's dependencies and test extra).
HARNESS_REQUIREMENTS = (
    "junitparser>=5.0",
    "defusedxml>=0.7",
    "jinja2>=3.1",
    "packaging>=23.0",
    "pytest>=8.0,<9.2",
    "pytest-xdist>=3.5",
)


def offered_releases(python: str = sys.executable, project: str = "vllm") -> tuple[str, ...]:
    """The versions the configured package index offers, asked of pip (never a fixed list)."""
    done = subprocess.run(
        [python, "-m", "pip", "index", "versions", project], capture_output=True, text=True, check=False
    )
    for line in done.stdout.splitlines():
        if line.strip().startswith("Available versions:"):
            return tuple(v.strip() for v in line.split(":", 1)[1].split(",") if v.strip())
    raise RuntimeError(f"pip could not list the versions of {project}: {_last_error(done.stderr)}")


def _last_error(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and "is ignored" not in line]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1]


def directory_size(path: Path) -> int:
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_size
            except OSError:
                continue
    return total


@dataclass
class ReleaseEnvs:
    root: Path
    keep: int = 2
    requirement: Callable[[str], str] = "vllm=={}".format  # the pip requirement for a release
    reuse: Mapping[str, Path] = field(default_factory=dict)  # existing envs, never deleted
    # The overrides recorded per release (install.load_overrides), and explicit ones given per
    # release that replace them (() = none: the release as published). An overridden release
    # gets an env of its own, named by its pins.
    recorded: Sequence[RecordedOverride] = ()
    explicit: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    python: str = field(default_factory=python_version)  # the envs' Python: venv builds them from ours
    log: list[dict[str, object]] = field(default_factory=list)
    peak_bytes: int = 0
    _used: list[Path] = field(default_factory=list)  # this run's envs, least recently used first

    def overrides_for(self, release: str) -> OverrideChoice:
        """What the installer applies to ``release`` (a version or ``vllm==X``; the installer
        decides for any other requirement by the version it resolves)."""
        version = release.removeprefix("vllm==")
        return choose_overrides(version, self.python, self.explicit.get(release), self.recorded)

    def env_for(self, release: str) -> Path | EnvironmentFailure:
        if release in self.reuse:
            return self.reuse[release]
        choice = self.overrides_for(release)
        override = " ".join(choice.pins)
        suffix = f"-override-{hashlib.sha256(override.encode()).hexdigest()[:8]}" if override else ""
        env = self.root / "envs" / f"vllm-{slug(release)}{suffix}"
        if (env / COMPLETE).exists():
            self._use(env)
            return env
        shutil.rmtree(env, ignore_errors=True)  # a build that never finished
        self._evict(room_for=1)
        started = time.monotonic()
        venv.EnvBuilder(with_pip=True, symlinks=True).create(env)
        python = str(env / "bin" / "python")
        requirement = self.requirement(release)
        # The installer applies the recorded overrides itself; only an explicit choice for this
        # release reaches it, never one the caller's own environment happens to hold.
        environment = {name: value for name, value in os.environ.items() if name != OVERRIDES_VARIABLE}
        if release in self.explicit:
            environment[OVERRIDES_VARIABLE] = " ".join(self.explicit[release]) or NO_OVERRIDES
        done = run_owned(
            # -I: the script's folder must not shadow stdlib modules on sys.path.
            [python, "-I", str(INSTALLER), requirement, *HARNESS_REQUIREMENTS],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        seconds = round(time.monotonic() - started, 1)
        overrides = _override_log(choice)
        if done.returncode != 0:
            shutil.rmtree(env, ignore_errors=True)
            reason = _last_error(done.stderr)
            failed = {"release": release, "installed": False, "install_s": seconds, "reason": reason}
            self.log.append({**failed, **overrides})
            return EnvironmentFailure(release, INSTALL, reason)
        size = directory_size(env)
        self.peak_bytes = max(self.peak_bytes, self._envs_size())
        (env / COMPLETE).write_text(json.dumps({"requirement": requirement, "bytes": size}) + "\n")
        self.log.append({"release": release, "installed": True, "install_s": seconds, "env_bytes": size, **overrides})
        self._use(env)
        return env

    def symptoms(self, release: str) -> tuple[str, ...]:
        """The crash messages recorded for ``release`` as what it does here without its pins."""
        version = release.removeprefix("vllm==")
        return tuple(
            entry.error for entry in self.recorded if entry.fails == "import" and entry.applies(version, self.python)
        )

    def _use(self, env: Path) -> None:
        if env in self._used:
            self._used.remove(env)
        self._used.append(env)

    def _built(self) -> list[Path]:
        folder = self.root / "envs"
        found = [env for env in folder.iterdir() if (env / COMPLETE).exists()] if folder.exists() else []
        # Envs of earlier runs first (oldest first), then this run's in the order it used them.
        return sorted(
            found,
            key=lambda env: (self._used.index(env) if env in self._used else -1, (env / COMPLETE).stat().st_mtime),
        )

    def _envs_size(self) -> int:
        folder = self.root / "envs"
        return directory_size(folder) if folder.exists() else 0

    def _evict(self, room_for: int) -> None:
        built = self._built()
        while built and len(built) + room_for > self.keep:
            shutil.rmtree(built.pop(0), ignore_errors=True)

    def clean(self) -> None:
        shutil.rmtree(self.root / "envs", ignore_errors=True)


def _override_log(choice: OverrideChoice) -> dict[str, object]:
    if not choice.source:
        return {}
    pins = " ".join(choice.pins) or NO_OVERRIDES
    return {"overrides": pins, "overrides_source": choice.source, "overrides_reason": choice.describe()}


def slug(release: str) -> str:
    """A folder name for a release or pip requirement (a wheel path, a URL)."""
    return "".join(c if c.isalnum() or c in ".-_" else "_" for c in release)[-80:]


def harness_path(root: Path) -> Path:
    """A folder holding only this harness package, for the lane env's PYTHONPATH.

    One per checkout (keyed by its path): the cache outlives checkouts, and a link left by
    another one, or dangling since it was deleted, must never make a lane run other code."""
    shim = root / "harness-path" / hashlib.sha256(str(HARNESS).encode()).hexdigest()[:12]
    link = shim / "harness"
    if not (link.is_symlink() and os.readlink(link) == str(HARNESS)):
        shim.mkdir(parents=True, exist_ok=True)
        staged = shim / f".harness-{os.getpid()}"
        staged.unlink(missing_ok=True)
        staged.symlink_to(HARNESS, target_is_directory=True)
        staged.replace(link)  # atomic: a concurrent run sees the old link or the new one
    return shim


def run_lane(
    env: Path,
    matrix: Path,
    report_dir: Path,
    root: Path,
    pytest_args: Sequence[str] = (),
    workers: int = 0,
    generations: Sequence[str] = (),
) -> Path | None:
    """Run ``matrix`` in ``env`` (``dflash-matrix run``); its matrix.json, or None if none was written.

    ``generations``: the lane runs as a GPU runner does, one run per compute capability on an
    emulated runner (``harness.matrix.emulated_generations``: the gpu_emulated lane), merged."""
    shutil.rmtree(report_dir, ignore_errors=True)
    environment = {
        **os.environ,
        "PYTHONPATH": str(harness_path(root)),
        # Each env keeps its own vLLM cache (releases write the same files with other fields),
        # kept beside the release envs: a reused env is only read, never written.
        "VLLM_CACHE_ROOT": str(root / "vllm-cache" / hashlib.sha256(str(env.resolve()).encode()).hexdigest()[:16]),
    }
    cli = [str(env / "bin" / "python"), "-m", "harness.cli"]
    runs = runner_runs(report_dir, workers, generations)
    for folder, runner in runs:
        command = [*cli, "run", str(matrix), "--report-dir", str(folder), *runner]
        if workers:
            command += ["-n", str(workers)]
        run_owned(
            [*command, "--", "-q", *pytest_args], env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    if len(runs) > 1:
        # As tox.ini's gpu-emulated env: the shards that exist are merged, one report for the lane.
        shards = [str(folder) for folder, _ in runs if (folder / "matrix.json").exists()]
        if shards:
            run_owned(
                [*cli, "merge", *shards, "--out", str(report_dir)],
                env=environment,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
    report = report_dir / "matrix.json"
    return report if report.exists() else None


def runner_runs(report_dir: Path, workers: int = 0, generations: Sequence[str] = ()) -> list[tuple[Path, list[str]]]:
    """The ``dflash-matrix run`` invocations of one lane run, each with its report folder and options:
    one, or one per emulated GPU generation (harness.plugins.gpu refuses the gpu_emulated lane
    without ``--emulated-gpus``), each into a shard under ``report_dir``, merged afterwards as
    tox.ini's gpu-emulated env does."""
    if not generations:
        return [(report_dir, [])]
    gpus = max(workers, 1)
    return [
        (report_dir / "shards" / f"sm{capability.replace('.', '')}", ["--emulated-gpus", f"{gpus}x{capability}"])
        for capability in generations
    ]


def run_cells(
    env: Path,
    matrix: Path,
    cells: Sequence[str],
    report_dir: Path,
    root: Path,
    release: str,
    symptoms: Sequence[str],
    generations: Sequence[str] = (),
) -> Answers | EnvironmentFailure:
    """Run ``cells`` of ``matrix`` in ``env``: each cell's verdict and message, or why it gave none."""
    report = run_lane(env, matrix, report_dir, root, ["-k", " or ".join(cells)], generations=generations)
    if report is None:
        return EnvironmentFailure(release, LANE, f"the lane wrote no report (see {report_dir})")
    return read_cells(json.loads(report.read_text()), release, symptoms)


def read_cells(document: Mapping[str, Any], release: str, symptoms: Sequence[str]) -> Answers:
    """A lane report's cells (matrix.json) as bisect reads them: a signature, or the environment
    failure a cell's crash is (``environment.cell_failure``)."""
    failures = cell_failures(document, release, symptoms)
    return {
        str(cell["id"]): failures.get((str(cell["run"]), str(cell["id"])))
        or (str(cell["verdict"]), str(cell.get("message") or ""))
        for cell in document.get("cells") or []
    }


def cell_failures(
    document: Mapping[str, Any], release: str, symptoms: Sequence[str]
) -> dict[tuple[str, str], EnvironmentFailure]:
    """(run key, cell id) -> the environment failure that cell's record is, for each one that is."""
    found = {}
    for cell in document.get("cells") or []:
        message = str(cell.get("message") or "")
        failure = cell_failure(release, str(cell["verdict"]), cell.get("stage"), message, symptoms)
        if failure is not None:
            found[str(cell["run"]), str(cell["id"])] = failure
    return found
