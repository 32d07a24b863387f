"""Release envs for bisect: built once, reused, bounded in number; a half-built env is never trusted;
the overrides recorded for a release are applied unless an explicit choice replaces them."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.releases import envs as release_envs
from harness.releases.environment import INSTALL, EnvironmentFailure
from harness.releases.envs import COMPLETE, ReleaseEnvs
from harness.releases.install import OVERRIDES_VARIABLE, RecordedOverride, load_overrides

pytestmark = pytest.mark.pure


class FakeInstaller:
    def __init__(self, broken: tuple[str, ...] = ()):
        self.broken = broken
        self.installs: list[str] = []
        self.environments: list[dict[str, str] | None] = []

    def create(self, env: Path) -> None:
        (env / "bin").mkdir(parents=True)
        (env / "bin" / "python").write_text("")

    def run(self, command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        assert Path(command[2]) == release_envs.INSTALLER and release_envs.INSTALLER.exists()
        requirement = command[3]  # python -I install.py REQUIREMENT ...
        self.installs.append(requirement)
        self.environments.append(kwargs.get("env"))
        Path(command[0]).parent.parent.joinpath("lib.bin").write_bytes(b"x" * 1000)
        explicit = (kwargs.get("env") or {}).get(OVERRIDES_VARIABLE)
        if requirement in self.broken and explicit in (None, "none"):  # as 0.34.0 with nothing recorded
            return subprocess.CompletedProcess(command, 1, "", "WARNING: x\nERROR: No matching distribution found\n")
        return subprocess.CompletedProcess(command, 0, "", "")


@pytest.fixture
def installer(monkeypatch: pytest.MonkeyPatch) -> FakeInstaller:
    fake = FakeInstaller(broken=("vllm==0.34.0",))
    monkeypatch.setattr(
        release_envs.venv, "EnvBuilder", lambda **kw: type("B", (), {"create": staticmethod(fake.create)})
    )
    monkeypatch.setattr(release_envs, "run_owned", fake.run)  # the install runs as an owned child
    return fake


def test_envs_are_reused_and_at_most_keep_exist(tmp_path: Path, installer: FakeInstaller) -> None:
    envs = ReleaseEnvs(tmp_path, keep=2)
    first = envs.env_for("0.24.0")
    assert isinstance(first, Path) and (first / COMPLETE).exists()
    assert envs.env_for("0.24.0") == first and installer.installs == ["vllm==0.24.0"]
    envs.env_for("0.28.0")
    envs.env_for("0.24.0")  # now the most recently used
    envs.env_for("0.30.0")  # evicts 0.28.0, the least recently used
    assert sorted(p.name for p in (tmp_path / "envs").iterdir()) == ["vllm-0.24.0", "vllm-0.30.0"]
    assert envs.peak_bytes > 0 and [entry["release"] for entry in envs.log] == ["0.24.0", "0.28.0", "0.30.0"]


def test_an_install_that_fails_is_named_and_removed(tmp_path: Path, installer: FakeInstaller) -> None:
    envs = ReleaseEnvs(tmp_path, keep=2)
    answer = envs.env_for("0.34.0")
    assert answer == EnvironmentFailure("0.34.0", INSTALL, "ERROR: No matching distribution found")
    assert not (tmp_path / "envs" / "vllm-0.34.0").exists()


def test_a_half_built_env_is_rebuilt_not_trusted(tmp_path: Path, installer: FakeInstaller) -> None:
    interrupted = tmp_path / "envs" / "vllm-0.25.0"
    (interrupted / "bin").mkdir(parents=True)  # a bisect killed mid-install: no marker
    env = ReleaseEnvs(tmp_path).env_for("0.25.0")
    assert env == interrupted and installer.installs == ["vllm==0.25.0"] and (env / COMPLETE).exists()


def test_a_reused_env_is_neither_built_nor_deleted(tmp_path: Path, installer: FakeInstaller) -> None:
    mine = tmp_path / "my-env"
    envs = ReleaseEnvs(tmp_path / "cache", keep=1, reuse={"0.33.0": mine})
    assert envs.env_for("0.33.0") == mine
    envs.env_for("0.24.0")
    envs.env_for("0.25.0")
    assert installer.installs == ["vllm==0.24.0", "vllm==0.25.0"]


def test_an_explicitly_overridden_release_installs_with_its_pins_in_an_env_of_its_own(
    tmp_path: Path, installer: FakeInstaller, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(OVERRIDES_VARIABLE, "flashinfer-python==0.6.0")  # the caller's, for a tox lane env
    envs = ReleaseEnvs(tmp_path, keep=3, explicit={"0.34.0": ("flashinfer-python==0.7.4",)})
    plain, overridden = envs.env_for("0.33.0"), envs.env_for("0.34.0")
    assert isinstance(overridden, Path) and overridden.name.startswith("vllm-0.34.0-override-")
    assert plain == tmp_path / "envs" / "vllm-0.33.0"
    # Only the overridden release's installer gets DFLASH_VLLM_OVERRIDES; the caller's own never leaks.
    assert OVERRIDES_VARIABLE not in (installer.environments[0] or {})
    assert (installer.environments[1] or {})[OVERRIDES_VARIABLE] == "flashinfer-python==0.7.4"
    assert envs.log[1]["overrides"] == "flashinfer-python==0.7.4" and envs.log[1]["overrides_source"] == "explicit"


SHIPPED = load_overrides()


def test_the_recorded_overrides_are_applied_without_being_asked(tmp_path: Path, installer: FakeInstaller) -> None:
    # The installer applies the recorded pins itself (tests/vllm_env/test_overrides.py); the env
    # is named by them, so an env built as published is never reused for an overridden install.
    envs = ReleaseEnvs(tmp_path, keep=3, recorded=SHIPPED, python="3.11")
    env = envs.env_for("0.27.1")
    assert isinstance(env, Path) and env.name.startswith("vllm-0.27.1-override-")
    assert OVERRIDES_VARIABLE not in (installer.environments[0] or {})
    assert envs.log[0]["overrides"] == "flashinfer-python==0.6.16.post4"
    assert envs.log[0]["overrides_source"] == "recorded"
    assert "array.array" in str(envs.log[0]["overrides_reason"])
    assert envs.symptoms("0.27.1") == ("TypeError: type 'array.array' is not subscriptable",)
    # On Python 3.12 flashinfer imports as published: nothing recorded applies, nothing to recognise.
    later = ReleaseEnvs(tmp_path / "py312", recorded=SHIPPED, python="3.12")
    assert later.overrides_for("0.27.1").pins == () and later.symptoms("0.27.1") == ()


def test_an_explicit_none_installs_the_release_as_published(tmp_path: Path, installer: FakeInstaller) -> None:
    envs = ReleaseEnvs(tmp_path, keep=3, recorded=SHIPPED, explicit={"0.34.0": ()})
    assert envs.overrides_for("0.34.0").replaced == ("flashinfer-python==0.7.4",)
    answer = envs.env_for("0.34.0")  # as published, 0.34.0 does not resolve
    assert isinstance(answer, EnvironmentFailure) and answer.kind == INSTALL
    assert (installer.environments[0] or {})[OVERRIDES_VARIABLE] == "none"
    assert envs.log[0]["overrides"] == "none" and envs.log[0]["overrides_source"] == "explicit"


def test_a_recorded_override_for_another_release_changes_nothing(tmp_path: Path, installer: FakeInstaller) -> None:
    only_0_34 = (RecordedOverride(("0.34.0",), (), ("flashinfer-python==0.7.4",), "install", "ERROR: x", "why"),)
    envs = ReleaseEnvs(tmp_path, recorded=only_0_34)
    assert envs.env_for("0.33.0") == tmp_path / "envs" / "vllm-0.33.0" and "overrides" not in envs.log[0]


def test_the_harness_path_is_this_checkout_even_over_a_stale_or_dangling_link(tmp_path: Path) -> None:
    shim = release_envs.harness_path(tmp_path)
    link = shim / "harness"
    assert link.resolve() == release_envs.HARNESS
    # The package itself (what `dflash-matrix run` imports in the release env), not a folder inside it.
    assert (link / "cli.py").is_file() and release_envs.INSTALLER.is_file()
    link.unlink()
    link.symlink_to(tmp_path / "a-deleted-checkout" / "harness", target_is_directory=True)  # dangling
    assert release_envs.harness_path(tmp_path) == shim and link.resolve() == release_envs.HARNESS
    other = tmp_path / "another-checkout" / "harness"
    other.mkdir(parents=True)
    link.unlink()
    link.symlink_to(other, target_is_directory=True)  # another checkout's harness
    assert release_envs.harness_path(tmp_path) == shim and link.resolve() == release_envs.HARNESS
