"""The bisect search with a fake lane: monotone and non-monotone histories, releases and cells that
gave no verdict (environment failures) stepped around and never read as a change."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from harness.releases.bisection import Answers, BisectError, Signature, bisect, releases_between
from harness.releases.environment import IMPORT, INSTALL, LANE, EnvironmentFailure
from harness.releases.envs import read_cells

pytestmark = pytest.mark.pure

RELEASES = (
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
)
WRONG: Signature = ("wrong-backend", "draft layers carry FLASH_ATTN, the platform selects TRITON_ATTN")
PASS: Signature = ("pass", "")


class FakeLane:
    """Signatures per cell as a function of the release; some releases cannot be installed."""

    def __init__(self, histories: Mapping[str, Mapping[str, Signature]], broken: Sequence[str] = ()):
        self.histories = histories
        self.broken = set(broken)
        self.installed: list[str] = []

    def __call__(self, release: str, cells: Sequence[str]) -> Answers | EnvironmentFailure:
        self.installed.append(release)
        if release in self.broken:
            return EnvironmentFailure(release, INSTALL, "flashinfer-python==0.7.3 is not on the index")
        return {cell: self.histories[cell][release] for cell in cells}


def history(*changes: tuple[str, Signature], start: Signature = WRONG) -> dict[str, Signature]:
    points = dict(changes)
    current, result = start, {}
    for release in RELEASES:
        current = points.get(release, current)
        result[release] = current
    return result


def test_the_index_order_not_string_order_decides_the_range() -> None:
    offered = ["0.9.0", "0.33.0", "0.25.1", "0.24.0", "0.10.0", "0.30.0rc1", "0.34.0", "0.25.0"]
    assert releases_between(offered, "0.24.0", "0.33.0") == ("0.24.0", "0.25.0", "0.25.1", "0.33.0")
    assert releases_between(offered, "0.24.0", "0.33.0", pre=True)[-2] == "0.30.0rc1"


def test_monotone_change_is_found_with_log_many_installs() -> None:
    lane = FakeLane({"sink-cell": history(("0.28.0", PASS)), "steady": history(start=PASS)})
    answers, state = bisect(RELEASES, ["sink-cell", "steady"], lane)
    by_cell = {answer.cell: answer for answer in answers}
    assert by_cell["sink-cell"].first_changed == "0.28.0" and by_cell["sink-cell"].last_same == "0.27.0"
    assert not by_cell["sink-cell"].changed_more_than_once
    assert by_cell["sink-cell"].line() == (
        "sink-cell: first changed in 0.28.0: wrong-backend (draft layers carry FLASH_ATTN, the platform selects "
        "TRITON_ATTN) -> pass"
    )
    assert by_cell["steady"].first_changed is None
    assert by_cell["steady"].line() == "steady: unchanged from 0.24.0 to 0.33.0: pass"
    # 2 ends + ~log2(9) middles + the neighbour after the change; never every release.
    assert len(lane.installed) == len(set(lane.installed)) <= 7
    assert state.probed == lane.installed


def test_a_change_that_is_not_the_last_is_flagged() -> None:
    # wrong-backend -> pass in 0.28.0, then pass -> crash in 0.31.0: new's crash is not the first change.
    crash: Signature = ("crash", "AssertionError at build")
    lane = FakeLane({"twice": history(("0.28.0", PASS), ("0.31.0", crash))})
    (answer,), _ = bisect(RELEASES, ["twice"], lane)
    assert answer.first_changed == "0.28.0" and answer.changed_more_than_once
    assert answer.line().endswith(
        "-> pass; CHANGED MORE THAN ONCE in the range (probed: 0.24.0 wrong-backend, 0.25.1 wrong-backend, "
        "0.26.0 wrong-backend, "
        "0.27.0 wrong-backend, 0.28.0 pass, 0.29.0 pass, 0.33.0 crash)"
    )


def test_the_neighbour_after_the_change_is_probed() -> None:
    # A one-release blip: binary search lands on it, the release after it shows it was undone.
    other: Signature = ("crash", "ValueError at build")
    lane = FakeLane({"blip": history(("0.28.0", other), ("0.29.0", WRONG), ("0.33.0", PASS))})
    (answer,), _ = bisect(RELEASES, ["blip"], lane)
    assert (answer.first_changed, answer.changed_more_than_once) == ("0.28.0", True)
    assert ("0.29.0", WRONG) in answer.history  # the neighbour after the change, probed for this


def test_uninstallable_releases_are_stepped_around_and_named() -> None:
    lane = FakeLane({"cell": history(("0.28.0", PASS))}, broken=["0.28.0", "0.27.0"])
    (answer,), state = bisect(RELEASES, ["cell"], lane)
    reason = "flashinfer-python==0.7.3 is not on the index"
    assert set(state.environment_failures()) == {
        EnvironmentFailure("0.27.0", INSTALL, reason),
        EnvironmentFailure("0.28.0", INSTALL, reason),
    }
    assert (answer.last_same, answer.first_changed, answer.skipped) == ("0.26.0", "0.29.0", ("0.27.0", "0.28.0"))
    assert answer.line().startswith("cell: changed after 0.26.0, by 0.29.0 (0.27.0, 0.28.0 gave no verdict): ")
    assert "stepped around 0.27.0 (install), 0.28.0 (install): environment failure, no verdict" in answer.line()


def test_an_endpoint_that_cannot_be_installed_stops_the_search() -> None:
    lane = FakeLane({"cell": history()}, broken=["0.33.0"])
    with pytest.raises(BisectError, match=r"vLLM 0\.33\.0 \(install\): flashinfer-python"):
        bisect(RELEASES, ["cell"], lane)


# What the lane's matrix.json records for a cell (the fields bisect reads), per release.
NOSINK = "sm90-TRITON_ATTN-causal-nosink-v2-cubin"
FLASHINFER_IMPORT = "TypeError: type 'array.array' is not subscriptable"  # 0.27.x on Python 3.11, as published


def report(release: str, verdict: str, stage: str | None, message: str) -> dict[str, list[dict[str, object]]]:
    run = f"selection / ... / vllm {release}"
    return {"cells": [{"id": NOSINK, "run": run, "verdict": verdict, "stage": stage, "message": message}]}


def lane_reports(release: str) -> dict[str, list[dict[str, object]]]:
    """The issue's bisect as a user ran it: 0.24.0's v2 loader drops the backend (PR #46770), 0.25.0
    fixes it, and 0.27.x's cells crash importing flashinfer before vLLM says anything."""
    if release == "0.24.0":
        return report(release, *WRONG_AT_SELECT)
    if release in ("0.27.0", "0.27.1"):
        return report(release, "crash", "config", FLASHINFER_IMPORT)
    return report(release, "pass", None, "draft layers carry TRITON_ATTN")


WRONG_AT_SELECT = ("wrong-backend", "select", "the platform selects TRITON_ATTN, but draft layers carry FLASH_ATTN")
WITH_0_27_1 = (*RELEASES[:5], "0.27.1", *RELEASES[5:])


def test_a_release_whose_cells_crash_importing_a_dependency_is_stepped_around_not_a_change() -> None:
    def probe(release: str, cells: Sequence[str]) -> Answers:
        return read_cells(lane_reports(release), release, symptoms=(FLASHINFER_IMPORT,))

    (answer,), state = bisect(WITH_0_27_1, [NOSINK], probe)
    assert (answer.first_changed, answer.changed_more_than_once) == ("0.25.0", False)
    assert answer.line().startswith(f"{NOSINK}: first changed in 0.25.0: wrong-backend (")
    named = [failure for failure in state.environment_failures() if failure.release in ("0.27.0", "0.27.1")]
    assert named and all(failure.kind == IMPORT and FLASHINFER_IMPORT in failure.reason for failure in named)
    assert "environment failure, no verdict" in answer.line()
    assert all(release not in dict(answer.history) for release in ("0.27.0", "0.27.1"))


def test_read_as_verdicts_the_same_crash_is_the_false_change_the_issue_reported() -> None:
    # The planted fault: the same reports with the crash taken as a verdict (no recorded symptom,
    # and a stage where an import error is vLLM's own) give the answer the issue complains of.
    def probe(release: str, cells: Sequence[str]) -> Answers:
        document = lane_reports(release)
        for cell in document["cells"]:
            cell["stage"] = "build"
        return read_cells(document, release, symptoms=())

    (answer,), _ = bisect(WITH_0_27_1, [NOSINK], probe)
    assert answer.changed_more_than_once and "CHANGED MORE THAN ONCE" in answer.line()


def test_a_cell_whose_lane_did_not_start_or_gave_no_verdict_is_stepped_around_for_that_cell_only() -> None:
    other: Signature = ("pass", "draft layers carry FLASH_ATTN")
    flip = history(("0.28.0", PASS))

    def probe(release: str, cells: Sequence[str]) -> Answers:
        answers: dict[str, Signature | EnvironmentFailure] = {"steady": other}
        if release == "0.28.0":  # the flipping cell's process never started here; it is left out
            return answers
        if release == "0.27.0":
            answers["flip"] = EnvironmentFailure(release, LANE, "LaneStartup: lane did not start within 300 s")
            return answers
        return {**answers, "flip": flip[release]}

    answers, state = bisect(RELEASES, ["flip", "steady"], probe)
    by_cell = {answer.cell: answer for answer in answers}
    assert (by_cell["flip"].last_same, by_cell["flip"].first_changed) == ("0.26.0", "0.29.0")
    assert by_cell["flip"].skipped == ("0.27.0", "0.28.0") and not by_cell["flip"].changed_more_than_once
    assert by_cell["steady"].first_changed is None and by_cell["steady"].no_verdict == ()
    kinds = {(failure.release, failure.kind) for failure in state.environment_failures()}
    assert kinds == {("0.27.0", LANE), ("0.28.0", LANE)}


def test_a_bisect_answer_names_the_finding_its_change_starts_or_ends() -> None:
    from harness.bundled import matrix_path
    from harness.commands.bisect import _finding_change
    from harness.expectations import expectations_for
    from harness.matrix import expand, load_matrix

    matrix = load_matrix(matrix_path("selection"))
    cells = {cell.id: cell for cell in expand(matrix)}
    expectations = expectations_for(matrix)
    fixed = cells["sm90-TRITON_ATTN-causal-sink-v2-cubin"]
    assert _finding_change(expectations, fixed, "0.24.0", "0.25.0") == "ends finding pr-46770-v2-loader-drops-backend"
    per_kind = cells["sm80-TRITON_ATTN_DIFFKV-causal-sink-hd256-dkv-bfloat16-tgtkind.FLASHINFER-v2-cubin"]
    assert _finding_change(expectations, per_kind, "0.25.1", "0.26.0") == (
        "starts finding target-per-kind-backend-overrides-draft"
    )
    assert _finding_change(expectations, per_kind, "0.26.0", "0.27.0") is None
    assert _finding_change(expectations, fixed, "vllm==0.24.0", "./vllm.whl") is None  # no version to judge by
