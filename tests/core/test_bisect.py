"""The bisect search with a fake lane: monotone and non-monotone histories, uninstallable releases."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from harness.releases.bisection import BisectError, Signature, Uninstallable, bisect, releases_between

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

    def __call__(self, release: str, cells: Sequence[str]) -> Mapping[str, Signature] | Uninstallable:
        self.installed.append(release)
        if release in self.broken:
            return Uninstallable(release, "flashinfer-python==0.7.3 is not on the index")
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
    assert state.uninstallable == {
        "0.27.0": "flashinfer-python==0.7.3 is not on the index",
        "0.28.0": "flashinfer-python==0.7.3 is not on the index",
    }
    assert (answer.last_same, answer.first_changed, answer.skipped) == ("0.26.0", "0.29.0", ("0.27.0", "0.28.0"))
    assert answer.line().startswith("cell: changed after 0.26.0, by 0.29.0 (0.27.0, 0.28.0 not installable): ")


def test_an_endpoint_that_cannot_be_installed_stops_the_search() -> None:
    lane = FakeLane({"cell": history()}, broken=["0.33.0"])
    with pytest.raises(BisectError, match=r"vLLM 0\.33\.0 cannot be installed: flashinfer-python"):
        bisect(RELEASES, ["cell"], lane)


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
    per_kind = cells["sm80-TRITON_ATTN_DIFFKV-causal-sink-tgtkind.TRITON_ATTN-v2-cubin"]
    assert _finding_change(expectations, per_kind, "0.25.1", "0.26.0") == (
        "starts finding target-per-kind-backend-overrides-draft"
    )
    assert _finding_change(expectations, per_kind, "0.26.0", "0.27.0") is None
    assert _finding_change(expectations, fixed, "vllm==0.24.0", "./vllm.whl") is None  # no version to judge by
