"""A finding across a history's releases (`dflash-matrix findings --history`): its first bad release is
the oldest whose cells show it (its verdict and message, inside or outside the range its rules record),
its last good one the newest before that whose cells got what they would without it (a release that
could not ask them is none), its cells counted per release; a cell that gave no verdict counts nowhere.
Written as a live history leaves its folder (matrix.json and history.json of merged single-release
reports), then read back by the command into every page and the index."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from harness.cli import main
from harness.expectations import Expectation
from harness.findings import Finding, FindingKind
from harness.reports.build import render_reports, write_files
from harness.reports.finding_pages import FindingHistory
from harness.reports.history import finding_releases, history_json, release_history
from harness.reports.inputs import load_inputs
from harness.reports.merge import merge
from harness.reports.model import FindingReleases
from harness.result import CellResult
from harness.verdict import Verdict

from .shards import DEFAULT_ENV, cell, write_shard

pytestmark = pytest.mark.pure

LOST = "the platform selects TRITON_ATTN, but draft layers carry FLASH_ATTN"
FINDING = Finding(
    id="lost-request",
    title="The loader drops the draft's attention backend",
    kind=FindingKind.UPSTREAM_BUG,
    vllm=SpecifierSet(">=0.24,<0.25"),
    first_release=Version("0.24.0"),
    measured="a synthetic history",
    upstream="unreported",
)
SINK: dict[str, Any] = {"sink": True, "lane": "selection"}


def _bug(causal: bool) -> CellResult:
    """A cell under the finding, showing it as its rule records."""
    shown = cell("TRITON_ATTN", causal=causal, verdict="wrong-backend", message=LOST, **SINK)
    return dataclasses.replace(
        shown, expected_message="draft layers carry FLASH_ATTN", finding=FINDING, correct=Expectation(Verdict.PASS, "")
    )


def _plain(causal: bool, verdict: str = "pass", expected: str | None = None, message: str = "") -> CellResult:
    return cell("TRITON_ATTN", causal=causal, verdict=verdict, expected=expected, message=message, **SINK)


# 0.22.0 cannot ask the cells; 0.23.0 gets what they would without the finding; 0.24.0 shows it as its
# rules record; 0.24.1 shows it outside the recorded range (its cells judged by the plain rule) in one
# cell, the other gave no verdict; 0.25.0 is fixed.
RELEASES: dict[str, list[CellResult]] = {
    "0.22.0": [_plain(True, "unavailable"), _plain(False, "unavailable")],
    "0.23.0": [_plain(True), _plain(False)],
    "0.24.0": [_bug(True), _bug(False)],
    "0.24.1": [
        _plain(True, "wrong-backend", "pass", LOST),
        _plain(False, "crash", "pass", "ImportError: libcudart.so.12"),
    ],
    "0.25.0": [_plain(True), _plain(False)],
}
NO_VERDICT = {"0.24.1": _plain(False).id}


def _history(folder: Path) -> Path:
    """A history report folder as `dflash-matrix history` writes it, and each release's own report."""
    reports = []
    for release, cells in RELEASES.items():
        env = {**DEFAULT_ENV, "vllm_version": release, "device": "simulated sm90"}
        reports.append(write_shard(folder / "releases" / release, cells, lane="selection", env=env) / "matrix.json")
    merged = merge(load_inputs([str(path) for path in reports]))
    keys = {run.vllm_version: run.key for run in merged.runs}
    no_verdict = {(keys[release], ident): "ImportError importing vLLM" for release, ident in NO_VERDICT.items()}
    files = render_reports(merged)
    files["history.json"] = json.dumps(history_json(release_history(merged, no_verdict))).encode()
    write_files(files, folder)
    return folder


def test_first_bad_last_good_fixed_and_cells_per_release(tmp_path: Path) -> None:
    folder = _history(tmp_path / "history")
    merged = merge(load_inputs([str(folder / "matrix.json")]))
    keys = {run.vllm_version: run.key for run in merged.runs}
    no_verdict = {(keys[release], ident): "no verdict" for release, ident in NO_VERDICT.items()}
    [(slot, ident)] = (measured := finding_releases(merged, no_verdict))
    found = measured[slot, ident]
    assert ident == FINDING.id and slot.startswith("selection / ")
    assert found.releases == tuple(RELEASES)
    assert found.showing == (0, 0, 2, 1, 0)
    assert found.without == (0, 2, 0, 0, 2)
    assert found.ran == (2, 2, 2, 1, 2)  # the cell that gave no verdict in 0.24.1 counts nowhere
    assert (found.first_bad, found.last_good, found.fixed_in) == ("0.24.0", "0.23.0", "0.25.0")
    assert found.per_release() == "0.22.0 0/2 · 0.23.0 0/2 · 0.24.0 2/2 · 0.24.1 1/1 · 0.25.0 0/2"
    # Without the no-verdict list, the 0.24.1 crash is a verdict: neither the finding's nor the correct one.
    assert finding_releases(merged)[slot, ident].ran == (2, 2, 2, 2, 2)


def test_a_release_that_could_not_ask_the_cells_is_no_last_good_one(tmp_path: Path) -> None:
    folder = tmp_path / "history"
    reports = []
    for release in ("0.22.0", "0.24.0"):
        env = {**DEFAULT_ENV, "vllm_version": release}
        reports.append(write_shard(folder / release, RELEASES[release], lane="selection", env=env) / "matrix.json")
    [found] = finding_releases(merge(load_inputs([str(path) for path in reports]))).values()
    assert (found.first_bad, found.last_good, found.fixed_in) == ("0.24.0", None, None)


def test_the_command_gives_every_page_and_the_index_the_historys_releases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = _history(tmp_path / "history")
    report = history / "releases" / "0.24.0"
    out = tmp_path / "pages"
    # 1: the repro script is written, not run (no vLLM here); the pages are complete all the same.
    assert main(["findings", str(report), "--history", str(history), "--out", str(out)]) == 1
    page = (out / f"{FINDING.id}.md").read_text()
    assert (
        f"- history `{history}` (vLLM 0.22.0 to 0.25.0, 5 releases, selection / cuda / simulated sm90): "
        "first bad release 0.24.0; last good: 0.23.0; fixed in 0.25.0"
    ) in page
    assert "| 0.24.1 | 1 | 0 | 1 |" in page and "| 0.23.0 | 0 | 2 | 2 |" in page
    assert "the history measures otherwise" not in page  # it agrees with the finding's first_release
    index = (out / "index.md").read_text()
    assert "| first bad (history) | last good (history) | cells showing it per release (history) |" in index
    assert "| 0.24.0 | 0.23.0 | 0.22.0 0/2 · 0.23.0 0/2 · 0.24.0 2/2 · 0.24.1 1/1 · 0.25.0 0/2 |" in index
    assert (
        "history " + str(history) + ": first bad 0.24.0, last good 0.23.0, fixed in 0.25.0" in capsys.readouterr().out
    )


def test_a_history_of_another_machine_says_it_holds_none_of_the_cells(tmp_path: Path) -> None:
    history = _history(tmp_path / "history")
    env = {**DEFAULT_ENV, "vllm_version": "0.24.0", "device": "simulated sm100"}
    report = write_shard(tmp_path / "report", RELEASES["0.24.0"], lane="selection", env=env)
    out = tmp_path / "pages"
    main(["findings", str(report), "--history", str(history), "--out", str(out)])
    page = (out / f"{FINDING.id}.md").read_text()
    assert "it holds none of this finding's cells on selection / cuda / simulated sm100" in page
    assert "| none of its cells in the history | - | - |" in (out / "index.md").read_text()


@pytest.mark.parametrize("missing", ["history.json", "matrix.json"])
def test_a_folder_that_is_no_history_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], missing: str
) -> None:
    history = _history(tmp_path / "history")
    (history / missing).unlink()
    out = tmp_path / "pages"
    assert main(["findings", str(history / "releases" / "0.24.0"), "--history", str(history), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"dflash-matrix: {history}: not a history report: no {missing} (give a `dflash-matrix history` --out folder)"
    ]
    assert not out.exists()  # nothing written before the input is checked


@pytest.mark.parametrize(
    ("recorded", "said"),
    [
        ("0.24.0", None),  # as measured
        ("0.25.0", "the history shows it in 0.24.0, before the first release the findings file records (0.25.0)"),
        ("0.23.0", "the findings file records first release 0.23.0; the history shows it only from 0.24.0"),
        ("0.21.0", None),  # before the history's oldest release: it cannot tell
    ],
)
def test_a_page_says_where_the_history_contradicts_the_recorded_first_release(recorded: str, said: str | None) -> None:
    measured = FindingReleases(FINDING.id, "slot", tuple(RELEASES), (0, 0, 2, 1, 0), (0, 2, 0, 0, 2), (2, 2, 2, 1, 2))
    history = FindingHistory("history", measured)
    assert history.contradiction(Version(recorded)) == said
    assert (f"- {said}" in history.section(Version(recorded))) == (said is not None)
