"""The release-history view and `dflash-matrix history`, with report directories written by the
same code a live run uses and a fake installer (no vLLM): a column per release in version order,
a change marked in the release it happened, a release that did not run a cell stepped over, a
release or cell that gave no verdict (an environment failure) named and never counted as a change,
and bad input refused before anything is installed."""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from harness import cli
from harness.commands import history as history_command
from harness.releases.environment import INSTALL, EnvironmentFailure
from harness.releases.envs import ReleaseEnvs, cell_failures
from harness.releases.envs import run_lane as real_run_lane
from harness.releases.install import load_overrides
from harness.reports.history import CHANGED, NO_VERDICT, release_history
from harness.reports.inputs import load_inputs
from harness.reports.merge import merge
from harness.result import CellResult
from harness.stages import Stage
from harness.verdict import Verdict

from .shards import DEFAULT_ENV, cell, write_shard

pytestmark = pytest.mark.pure

SINK: dict[str, Any] = {"backend": "TRITON_ATTN", "sink": True}
WRONG = "requested TRITON_ATTN: draft layers carry FLASH_ATTN"


def shard(tmp: Path, release: str, cells: list[CellResult]) -> Path:
    env = {**DEFAULT_ENV, "vllm_version": release, "device": "simulated sm90"}
    return write_shard(tmp / release, cells, env=env) / "matrix.json"


def histories(tmp: Path, per_release: dict[str, list[CellResult]]) -> Any:
    # Written in an order other than the releases' own: the view sorts by version, not input.
    paths = [shard(tmp, release, cells) for release, cells in reversed(per_release.items())]
    return release_history(merge(load_inputs([str(p) for p in paths])))


def _selection_lane(
    lane: Callable[[Path, Sequence[str], int], Path | None],
) -> Callable[..., Path | None]:
    """A stand-in for ``run_lane`` with its signature: ``lane(report_dir, pytest_args, workers)``
    answers each release; the selection lane runs once per release (no emulated generations)."""

    def run_lane(*args: Any, **kwargs: Any) -> Path | None:
        # Bound to the real signature: a call run_lane would refuse fails here too.
        called = inspect.signature(real_run_lane).bind(*args, **kwargs)
        called.apply_defaults()
        assert tuple(called.arguments["generations"]) == ()
        return lane(called.arguments["report_dir"], called.arguments["pytest_args"], called.arguments["workers"])

    return run_lane


def test_a_change_is_marked_in_the_release_it_happened(tmp_path: Path) -> None:
    [history] = histories(
        tmp_path,
        {
            "0.24.0": [cell(**SINK, verdict="wrong-backend", message=WRONG), cell("FLASH_ATTN")],
            "0.25.0": [cell(**SINK), cell("FLASH_ATTN")],
            "0.9.0": [cell(**SINK, verdict="wrong-backend", message=WRONG), cell("FLASH_ATTN")],
            "0.33.0": [cell(**SINK), cell("FLASH_ATTN", verdict="crash", message="boom")],
        },
    )
    assert history.releases == ("0.9.0", "0.24.0", "0.25.0", "0.33.0")  # PEP 440 order, not text order
    by_id = {item.cell: item for item in history.cells}
    sink, flash = by_id[cell(**SINK).id], by_id[cell("FLASH_ATTN").id]
    assert sink.changed_in == ("0.25.0",)
    assert [step.verdict for step in sink.steps] == [Verdict.WRONG_BACKEND] * 2 + [Verdict.PASS] * 2
    assert flash.changed_in == ("0.33.0",)
    assert history.changes_per_release() == {"0.24.0": 0, "0.25.0": 1, "0.33.0": 1}


def test_a_release_that_did_not_run_a_cell_is_stepped_over_and_a_new_message_is_not_a_change(
    tmp_path: Path,
) -> None:
    [history] = histories(
        tmp_path,
        {
            "0.24.0": [cell(**SINK, verdict="crash", message="old words"), cell("FLASH_ATTN")],
            "0.25.0": [cell("FLASH_ATTN")],
            "0.26.0": [cell(**SINK, verdict="crash", message="new words"), cell("FLASH_ATTN")],
        },
    )
    sink = next(item for item in history.cells if item.cell == cell(**SINK).id)
    assert [step.verdict for step in sink.steps] == [Verdict.CRASH, None, Verdict.CRASH]
    assert sink.changed_in == ()
    assert sink.reworded_in == ("0.26.0",)


class FakeEnvs(ReleaseEnvs):
    """Every release 'installs' as this interpreter's prefix, except the broken ones."""

    broken: Sequence[str] = ("0.34.0",)

    def env_for(self, release: str) -> Path | EnvironmentFailure:
        if release in self.broken:
            reason = "flashinfer-python==0.7.3 is not on the index"
            self.log.append({"release": release, "installed": False, "reason": reason})
            return EnvironmentFailure(release, INSTALL, reason)
        self.log.append({"release": release, "installed": True})
        return Path(sys.prefix)


def test_the_command_merges_every_release_and_names_the_one_it_could_not_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    verdicts = {"0.24.0": "wrong-backend", "0.25.0": "pass", "0.33.0": "pass"}
    ran: list[tuple[str, Sequence[str], int]] = []

    def lane(report_dir: Path, pytest_args: Sequence[str], workers: int) -> Path | None:
        release = report_dir.name
        ran.append((release, tuple(pytest_args), workers))
        if release == "0.26.0":
            return None  # the lane died before writing its report
        return shard(tmp_path / "lane", release, [cell(**SINK, verdict=verdicts[release])])

    monkeypatch.setattr(history_command, "run_lane", _selection_lane(lane))
    monkeypatch.setattr(history_command, "release_envs", lambda args, sub: FakeEnvs(tmp_path / "cache"))
    offered = ("0.34.0", "0.33.0", "0.26.0", "0.25.0", "0.24.0", "0.23.0")
    monkeypatch.setattr("harness.commands.release_range.offered_releases", lambda: offered)
    out = tmp_path / "history"
    status = cli.main(["history", "selection", "--old", "0.24.0", "--out", str(out), "-k", "sm90"])
    printed = capsys.readouterr().out
    assert status == 0
    # --new defaults to the newest release; each installable one ran the lane with the pytest args.
    assert ran == [(release, ("-k", "sm90"), 2) for release in ("0.24.0", "0.25.0", "0.26.0", "0.33.0")]
    assert "environment failure: vLLM 0.34.0 (install): flashinfer-python==0.7.3 is not on the index" in printed
    assert "1 changed verdict (per release: 0.25.0 1, 0.33.0 0)" in printed
    assert "environment failure: vLLM 0.26.0 (lane): the lane ended without writing matrix.json" in printed
    document = json.loads((out / "history.json").read_text())
    [slot] = document["slots"]
    assert slot["releases"] == ["0.24.0", "0.25.0", "0.33.0"]
    assert slot["cells"][0]["changed_in"] == ["0.25.0"]
    named = {(item["release"], item["kind"], item["cells"]) for item in document["environment_failures"]}
    assert named == {("0.34.0", "install", "all"), ("0.26.0", "lane", "all")}
    markdown = (out / "history.md").read_text()
    assert f"**{CHANGED} ✅ pass**" in markdown
    assert "environment failure: vLLM 0.34.0 (install): flashinfer-python==0.7.3 is not on the index" in markdown
    assert "vLLM 0.26.0 (lane): the lane ended without writing matrix.json; left out, not a change" in markdown
    merged = json.loads((out / "matrix.json").read_text())
    assert len(merged["runs"]) == 3 and len(merged["cells"]) == 3
    run_record = json.loads((out / "history-run.json").read_text())
    assert [item["release"] for item in run_record["installs"]] == ["0.24.0", "0.25.0", "0.26.0", "0.33.0", "0.34.0"]


def at_config(result: CellResult) -> CellResult:
    return dataclasses.replace(result, stage=Stage.CONFIG)


def test_cells_that_crashed_importing_vllm_are_no_verdict_and_never_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    flashinfer = "TypeError: type 'array.array' is not subscriptable"  # what 0.27.x does as published
    startup = "LaneStartup: lane failed to start: cell process exited with status 1"
    per_release = {
        "0.26.0": [cell(**SINK), cell("FLASH_ATTN")],
        # Every cell crashed importing flashinfer: 0.27.1 said nothing, and is left out.
        "0.27.1": [
            at_config(cell(**SINK, verdict="crash", message=flashinfer)),
            at_config(cell("FLASH_ATTN", verdict="crash", message=flashinfer)),
        ],
        # One cell's process never started: that cell gave no verdict, the other did.
        "0.28.0": [at_config(cell(**SINK, verdict="crash", message=startup)), cell("FLASH_ATTN")],
        "0.29.0": [cell(**SINK), cell("FLASH_ATTN", verdict="crash", message="ValueError: a real change")],
    }

    def lane(report_dir: Path, pytest_args: Sequence[str], workers: int) -> Path | None:
        return shard(tmp_path / "lane", report_dir.name, per_release[report_dir.name])

    monkeypatch.setattr(history_command, "run_lane", _selection_lane(lane))
    envs = FakeEnvs(tmp_path / "cache", recorded=load_overrides(), python="3.11")
    monkeypatch.setattr(history_command, "release_envs", lambda args, sub: envs)
    out = tmp_path / "history"
    status = cli.main(["history", "selection", "--releases", *per_release, "--out", str(out)])
    printed = capsys.readouterr()
    assert status == 0
    assert "history: vLLM 0.27.1 with flashinfer-python==0.6.16.post4 (recorded in overrides.toml:" in printed.err
    assert (
        "environment failure: vLLM 0.27.1 (import): every cell (2): TypeError: type 'array.array' is not "
        "subscriptable (recorded for this release without its overrides); left out, not a change"
    ) in printed.out
    assert "environment failure: vLLM 0.28.0 (lane): LaneStartup: lane failed to start" in printed.out
    assert "1 cells, marked as no verdict, not counted as changes" in printed.out
    document = json.loads((out / "history.json").read_text())
    [slot] = document["slots"]
    assert slot["releases"] == ["0.26.0", "0.28.0", "0.29.0"]
    assert slot["changes_per_release"] == {"0.28.0": 0, "0.29.0": 1}
    by_id = {item["id"]: item for item in slot["cells"]}
    sink = by_id[cell(**SINK).id]
    assert sink["changed_in"] == [] and sink["no_verdict_in"] == ["0.28.0"] and sink["verdicts"][1] is None
    assert by_id[cell("FLASH_ATTN").id]["changed_in"] == ["0.29.0"]
    assert f"{NO_VERDICT} no verdict" in (out / "history.md").read_text()


def test_a_crash_importing_a_package_while_building_is_a_verdict(tmp_path: Path) -> None:
    # ROCm's AITER backend imports `aiter` while it is built: vLLM's behaviour, recorded as a verdict.
    aiter = cell("ROCM_AITER_UNIFIED_ATTN", verdict="crash", message="ModuleNotFoundError: No module named 'aiter'")
    document = {"cells": [{**aiter.to_json(), "run": "r"}]}
    assert cell_failures(document, "0.32.0", ()) == {}
    at_start = {"cells": [{**at_config(aiter).to_json(), "run": "r"}]}
    assert [f.kind for f in cell_failures(at_start, "0.32.0", ()).values()] == ["import"]


@pytest.mark.parametrize(
    ("arguments", "complaint"),
    [
        (["--old", "0.33.0", "--new", "0.24.0"], "0.33.0 is not older than --new 0.24.0"),
        (["--old", "banana"], "'banana' is not a vLLM version"),
        (["--new", "0.33.0"], "--old is needed"),
        (["--old", "0.24.0", "--override", "0.34.0=flashinfer-python>=0.7"], "is not an exact pin"),
        (["--old", "0.24.0", "--override", "flashinfer-python==0.7.4"], "is not RELEASE=PINS"),
        (["--old", "0.24.0", "--override", "0.34=none"], "0.34 is not a release of this range (valid: 0.24.0, 0.33.0)"),
        (["--old", "0.24.0", "--reuse-env", "0.33.0=/nonexistent"], "is not RELEASE=PATH of a venv"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_anything_is_installed(
    arguments: list[str],
    complaint: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def no_install(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing may be installed or run on bad input")

    monkeypatch.setattr(ReleaseEnvs, "env_for", no_install)
    monkeypatch.setattr(history_command, "run_lane", no_install)
    monkeypatch.setattr("harness.commands.release_range.offered_releases", lambda: ("0.33.0", "0.24.0"))
    status = cli.main(["history", "selection", "--out", str(tmp_path / "out"), "--cache", str(tmp_path), *arguments])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2
    assert len(err) == 1 and complaint in err[0]
    assert not (tmp_path / "out").exists()


def test_a_bad_overrides_file_stops_history_in_one_line_before_anything_is_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "overrides.toml"
    bad.write_text(
        '[[override]]\nvllm = ["0.34.0"]\npins = ["flashinfer-python==0.7.4"]\nfails = "install"\nerror = "x"\n'
    )
    real = load_overrides
    monkeypatch.setattr("harness.commands.release_range.load_overrides", lambda: real(bad))

    def no_install(*args: object, **kwargs: object) -> None:
        raise AssertionError("nothing may be installed or run on bad input")

    monkeypatch.setattr(ReleaseEnvs, "env_for", no_install)
    status = cli.main(["history", "selection", "--releases", "0.33.0", "0.34.0", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and err == [f"dflash-matrix: {bad}: override[0].reason: is missing: every override names it"]


def test_each_change_names_the_finding_it_starts_or_ends(tmp_path: Path) -> None:
    import dataclasses

    from harness.bundled import matrix_path
    from harness.expectations import Expectation
    from harness.findings import load_findings
    from harness.reports.history import history_json, history_markdown

    findings = load_findings(matrix_path("selection").parent / "expectations" / "findings.toml").findings
    pr = findings["pr-46770-v2-loader-drops-backend"]
    bug = dataclasses.replace(
        cell(**SINK, verdict="wrong-backend", message=WRONG), finding=pr, correct=Expectation(Verdict.PASS, "fixed")
    )
    [history] = histories(tmp_path, {"0.24.0": [bug], "0.25.0": [cell(**SINK)]})
    text = history_markdown([history])
    assert f"-> pass (ends finding {pr.id})" in text
    assert history_json([history])["slots"][0]["cells"][0]["findings"] == [pr.id, None]
