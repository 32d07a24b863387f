"""How watch, history and bisect run a lane in a release env (harness.releases.envs.run_lane).

The gpu_emulated lane runs one GPU generation per run (harness.plugins.gpu refuses it without
--emulated-gpus), so a release env must run it once per generation and merge the shards, as tox.ini's
gpu-emulated env does; a single plain run writes no report (the watch of gpu-emulated on vLLM 0.34.0
said "the lane ended without writing matrix.json" until this was so)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.bundled import matrix_path
from harness.matrix import emulated_generations, load_matrix
from harness.releases import envs

pytestmark = pytest.mark.pure


def test_only_the_gpu_emulated_lane_runs_per_generation() -> None:
    assert emulated_generations(load_matrix(matrix_path("gpu-emulated"))) == ("9.0", "10.0")
    assert emulated_generations(load_matrix(matrix_path("selection"))) == ()
    assert emulated_generations(load_matrix(matrix_path("gpu"))) == ()  # real runners: one generation each


def test_a_lane_without_generations_runs_once_into_its_report_folder(tmp_path: Path) -> None:
    assert envs.runner_runs(tmp_path, 2) == [(tmp_path, [])]


def test_an_emulated_lane_runs_once_per_generation_on_an_emulated_runner(tmp_path: Path) -> None:
    assert envs.runner_runs(tmp_path, 2, ("9.0", "10.0")) == [
        (tmp_path / "shards" / "sm90", ["--emulated-gpus", "2x9.0"]),
        (tmp_path / "shards" / "sm100", ["--emulated-gpus", "2x10.0"]),
    ]
    # -n 0 (no workers) still names one GPU: the plugin refuses zero.
    assert envs.runner_runs(tmp_path, 0, ("9.0",))[0][1] == ["--emulated-gpus", "1x9.0"]


def test_run_lane_merges_the_generation_shards(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    commands: list[list[str]] = []

    def fake_run(command: list[str], **_: object) -> None:
        commands.append(command)
        if command[3] == "run":  # each shard writes its report, as the lane does
            folder = Path(command[command.index("--report-dir") + 1])
            folder.mkdir(parents=True)
            (folder / "matrix.json").write_text("{}")
        else:
            (tmp_path / "out" / "matrix.json").write_text("{}")

    monkeypatch.setattr(envs, "run_owned", fake_run)
    generations = emulated_generations(load_matrix(matrix_path("gpu-emulated")))
    report = envs.run_lane(
        tmp_path / "env", matrix_path("gpu-emulated"), tmp_path / "out", tmp_path, ["-k", "x"], 1, generations
    )
    assert report == tmp_path / "out" / "matrix.json"
    assert [command[3] for command in commands] == ["run", "run", "merge"]
    assert commands[0][commands[0].index("--emulated-gpus") + 1] == "1x9.0"
    assert commands[1][commands[1].index("--emulated-gpus") + 1] == "1x10.0"
    assert commands[2][4:] == [
        str(tmp_path / "out" / "shards" / "sm90"),
        str(tmp_path / "out" / "shards" / "sm100"),
        "--out",
        str(tmp_path / "out"),
    ]
