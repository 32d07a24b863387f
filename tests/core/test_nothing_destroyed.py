"""Nothing a command writes can destroy what it reads (issue 36), tried as a hostile but ordinary user would.

Every command is fed broken versions of real inputs (truncated, empty, binary, the wrong shape) and
outputs that are inputs or cannot be folders: each answer is exit 2 and one line on stderr, never a
traceback, and every input file is byte-identical afterwards. A full disk or a read-only file at any
write of a set leaves the old set whole; two `expectations record` runs at once keep what each said
it wrote. The inputs are real: the sample reports in docs/examples and a watch delta the fake lane of
test_watch.py gives. Commands run in this process, so a traceback is an exception out of ``main``.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import atomic
from harness.cli import main
from harness.errors import InputError
from harness.expectations import load_expectations
from harness.releases import envs as release_envs

from .test_watch import EXPECTATIONS, FINDINGS, MATRIX, Fakes

pytestmark = pytest.mark.pure

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples" / "reports"
CELL = "B_ATTN-noncausal-sink"  # a cell of the sample report (the planted mismatch)


def _world(root: Path) -> Path:
    """Real inputs of every command: two sample reports, a watched matrix and its reviewed deltas."""
    shutil.copytree(EXAMPLES, root / "reports")
    (root / "expectations").mkdir()
    (root / "m.toml").write_text(MATRIX)
    (root / "expectations" / "m.toml").write_text(EXPECTATIONS)
    (root / "expectations" / "findings.toml").write_text(FINDINGS)
    fakes = Fakes(root, ("0.33.0", "0.34.0", "0.35.0"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("harness.commands.watch.offered_releases", lambda: fakes.offered)
        patch.setattr(release_envs.ReleaseEnvs, "env_for", lambda envs, release: fakes.install(envs, release))
        patch.setattr("harness.commands.watch.run_lane", fakes.lane)
        out = ["--out", str(root / "watch"), "--cache", str(root / "cache"), "--no-repro-check"]
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            assert main(["watch", str(root / "m.toml"), *out]) == 0
    for release in ("0.34.0", "0.35.0"):
        patch_file = root / "watch" / "m" / release / "patch.toml"
        patch_file.write_text(patch_file.read_text().replace("TODO", "reviewed"))
    shutil.rmtree(root / "env")
    return root


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _world(tmp_path_factory.mktemp("world"))


@dataclass(frozen=True)
class Case:
    """A command over the world, and the input file a test breaks (relative to the world)."""

    name: str
    argv: Callable[[Path], list[str]]
    broken: str


def _record(root: Path, release: str = "0.34.0", *more: str) -> list[str]:
    # --matrix: the delta names the world it was made in, not this copy of it.
    delta = root / "watch" / "m" / release / "delta.json"
    return ["expectations", "record", str(delta), "--matrix", str(root / "m.toml"), *more]


# Each command with an input it reads that is JSON (a broken one must be refused) ...
JSON_CASES = (
    Case("diff", lambda r: ["diff", f"{r}/reports/before", f"{r}/reports/after"], "reports/after/matrix.json"),
    Case("merge", lambda r: ["merge", f"{r}/reports/before", "--out", f"{r}/out"], "reports/before/matrix.json"),
    Case(
        "repro",
        lambda r: ["repro", CELL, "--report", f"{r}/reports/after", "--out", f"{r}/r.py"],
        "reports/after/matrix.json",
    ),
    Case("findings", lambda r: ["findings", f"{r}/reports/after", "--out", f"{r}/out"], "reports/after/matrix.json"),
    Case(
        "watch --report",
        lambda r: [
            "watch",
            f"{r}/m.toml",
            "--report",
            f"0.34.0={r}/watch/m/0.34.0/run",
            "--out",
            f"{r}/w2",
            "--cache",
            f"{r}/c",
            "--no-repro-check",
        ],
        "watch/m/0.34.0/run/matrix.json",
    ),
    Case("expectations record", lambda r: _record(r, "0.34.0", "--dry-run"), "watch/m/0.34.0/delta.json"),
    Case(
        "watch-issues",
        lambda r: ["watch-issues", f"{r}/watch", "--repo", "o/n", "--gh", f"{r}/no-gh"],
        "watch/m/0.34.0/delta.json",
    ),
)
# ... and inputs that a cut may leave valid (a TOML file cut at a line, a killed run's journal).
TEXT_CASES = (
    Case(
        "report",
        lambda r: ["report", f"{r}/reports/after/journal", "--out", f"{r}/out"],
        "reports/after/journal/main.jsonl",
    ),
    Case("merge junit", lambda r: ["merge", f"{r}/reports/after", "--out", f"{r}/out"], "reports/after/junit.xml"),
    Case("cells", lambda r: ["cells", f"{r}/m.toml", "--vllm", "0.33.0"], "expectations/m.toml"),
    Case("record patch", lambda r: _record(r, "0.34.0", "--dry-run"), "watch/m/0.34.0/patch.toml"),
    Case("record findings", lambda r: _record(r, "0.34.0", "--dry-run"), "expectations/findings.toml"),
    Case("history plan", lambda r: ["history", f"{r}/m.toml", "--releases", "0.34.0", "--plan"], "m.toml"),
)
ALL_CASES = JSON_CASES + TEXT_CASES


@dataclass(frozen=True)
class Answer:
    status: int
    err: str


def _run(argv: list[str]) -> Answer:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        status = main(argv)  # an exception here is the traceback a user would see
    return Answer(status, err.getvalue())


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def _copy(pristine: Path) -> Iterator[Path]:
    """A fresh copy of the world per example: Hypothesis runs many in one test."""
    root = Path(pristine.parent / f"{pristine.name}-try-{threading.get_ident()}")
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pristine, root)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _refused_in_one_line(answer: Answer) -> None:
    assert answer.status == 2, answer
    assert len(answer.err.strip().splitlines()) == 1, answer.err
    assert "Traceback" not in answer.err


def _inputs_kept(before: dict[str, bytes], root: Path) -> None:
    after = _snapshot(root)
    assert {name: after.get(name) for name in before} == before


def _broken(data: bytes) -> st.SearchStrategy[bytes]:
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
        max_leaves=6,
    )
    return st.one_of(
        # Truncated (a full disk, a killed copy), short of the last brace: a cut newline is no damage.
        st.integers(0, len(data.rstrip()) - 1).map(lambda n: data[:n]),
        st.just(b""),
        st.binary(min_size=1, max_size=64).map(lambda b: b"\xff\xfe\x00" + b),  # binary, not UTF-8
        json_values.filter(lambda v: not isinstance(v, dict)).map(lambda v: json.dumps(v).encode()),
    )


SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], database=None
)


@pytest.mark.parametrize("case", JSON_CASES, ids=lambda case: case.name)
def test_a_broken_json_input_is_one_line_exit_2_and_every_input_is_kept(case: Case, pristine: Path) -> None:
    data = (pristine / case.broken).read_bytes()

    @SETTINGS
    @given(broken=_broken(data))
    def check(broken: bytes) -> None:
        with _copy(pristine) as root:
            (root / case.broken).write_bytes(broken)
            before = _snapshot(root)
            _refused_in_one_line(_run(case.argv(root)))
            _inputs_kept(before, root)

    check()


@pytest.mark.parametrize("case", TEXT_CASES, ids=lambda case: case.name)
def test_a_broken_text_input_is_read_or_refused_in_one_line_and_every_input_is_kept(case: Case, pristine: Path) -> None:
    data = (pristine / case.broken).read_bytes()

    @SETTINGS
    @given(broken=_broken(data) | st.binary(max_size=200))
    def check(broken: bytes) -> None:
        with _copy(pristine) as root:
            (root / case.broken).write_bytes(broken)
            before = _snapshot(root)
            answer = _run(case.argv(root))
            if answer.status == 2:
                _refused_in_one_line(answer)
            else:
                assert answer.status in (0, 1) and "Traceback" not in answer.err
            _inputs_kept(before, root)

    check()


# Outputs that are inputs: each once destroyed what the command read.
OVERLAPS = {
    "repro over its report": lambda r: [
        "repro",
        CELL,
        "--report",
        f"{r}/reports/after",
        "--out",
        f"{r}/reports/after/matrix.json",
    ],
    "diff --json over CURRENT": lambda r: [
        "diff",
        f"{r}/reports/before",
        f"{r}/reports/after",
        "--json",
        f"{r}/reports/after/matrix.json",
    ],
    "diff --md over BASELINE": lambda r: [
        "diff",
        f"{r}/reports/before/matrix.json",
        f"{r}/reports/after",
        "--md",
        f"{r}/reports/before/matrix.json",
    ],
    "merge into its input": lambda r: [
        "merge",
        f"{r}/reports/before",
        f"{r}/reports/after",
        "--out",
        f"{r}/reports/after",
    ],
    "report over its journal": lambda r: [
        "report",
        f"{r}/reports/after/journal/main.jsonl",
        "--out",
        f"{r}/reports/after/journal/main.jsonl",
    ],
    "findings into its report": lambda r: ["findings", f"{r}/reports/after", "--out", f"{r}/reports/after"],
}
# Outputs that cannot be folders: a file is in the way.
IN_THE_WAY = {
    "merge": lambda r: ["merge", f"{r}/reports/before", "--out", f"{r}/m.toml/out"],
    "report": lambda r: ["report", f"{r}/reports/after/journal", "--out", f"{r}/m.toml"],
    "findings": lambda r: ["findings", f"{r}/reports/after", "--out", f"{r}/m.toml/x"],
    "repro": lambda r: ["repro", CELL, "--report", f"{r}/reports/after", "--out", f"{r}/m.toml/r.py"],
    "watch --out": lambda r: [
        "watch",
        f"{r}/m.toml",
        "--release",
        "0.34.0",
        "--out",
        f"{r}/m.toml",
        "--cache",
        f"{r}/c",
    ],
    "watch --cache": lambda r: [
        "watch",
        f"{r}/m.toml",
        "--release",
        "0.34.0",
        "--out",
        f"{r}/w",
        "--cache",
        f"{r}/m.toml",
    ],
    "history --out": lambda r: [
        "history",
        f"{r}/m.toml",
        "--releases",
        "0.34.0",
        "--out",
        f"{r}/m.toml/h",
        "--cache",
        f"{r}/c",
    ],
    "history --cache": lambda r: [
        "history",
        f"{r}/m.toml",
        "--releases",
        "0.34.0",
        "--out",
        f"{r}/h",
        "--cache",
        f"{r}/m.toml",
    ],
}
WRONG = {
    "watch --release ''": lambda r: ["watch", f"{r}/m.toml", "--release", "", "--out", f"{r}/w", "--cache", f"{r}/c"],
    "a report of another vLLM than its label": lambda r: [
        "watch",
        f"{r}/m.toml",
        "--report",
        f"0.35.0={r}/watch/m/0.34.0/run",
        "--out",
        f"{r}/w",
    ],
    "a report of a release already recorded": lambda r: [
        "watch",
        f"{r}/m.toml",
        "--report",
        f"0.33.0={r}/watch/m/0.34.0/run",
        "--out",
        f"{r}/w",
    ],
    "watch-issues without gh": lambda r: ["watch-issues", f"{r}/watch", "--repo", "o/n", "--gh", f"{r}/no-such-gh"],
}


@pytest.mark.parametrize(
    "argv", [*OVERLAPS.values(), *IN_THE_WAY.values(), *WRONG.values()], ids=[*OVERLAPS, *IN_THE_WAY, *WRONG]
)
def test_an_output_over_an_input_or_a_wrong_option_is_refused_before_anything_runs(
    argv: Callable[[Path], list[str]], pristine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(release_envs.ReleaseEnvs, "env_for", lambda *_: pytest.fail("installed"))
    with _copy(pristine) as root:
        before = _snapshot(root)
        _refused_in_one_line(_run(argv(root)))
        _inputs_kept(before, root)
        assert not (root / "w").exists() and not (root / "h").exists()


def test_a_patch_rule_naming_a_backend_that_is_no_axis_value_is_refused(pristine: Path) -> None:
    with _copy(pristine) as root:
        patch = root / "watch" / "m" / "0.34.0" / "patch.toml"
        patch.write_text(patch.read_text().replace('backend = "TRITON_ATTN"', 'backend = "TRITON_ATN"', 1))
        before = _snapshot(root)
        answer = _run(_record(root))
        _refused_in_one_line(answer)
        assert "TRITON_ATN" in answer.err and "no value of the matrix's backend axis" in answer.err
        _inputs_kept(before, root)


def test_a_lane_file_without_a_releases_line_is_one_line(pristine: Path) -> None:
    with _copy(pristine) as root:
        lane = root / "expectations" / "m.toml"
        lane.write_text(lane.read_text().replace('releases = ["0.32.0", "0.33.0"]\n', ""))
        before = _snapshot(root)
        _refused_in_one_line(_run(_record(root)))
        _inputs_kept(before, root)


# Fault injection: the nth temporary of a set fails to be written.
def _failing_at(n: int, error: int, monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    real = atomic._temporary
    tried: list[Path] = []

    def temporary(path: Path, data: bytes) -> Path:
        tried.append(path)
        if len(tried) == n:
            raise OSError(error, "injected", str(path))
        return real(path, data)

    monkeypatch.setattr(atomic, "_temporary", temporary)
    return tried


@pytest.mark.parametrize("error", [errno.ENOSPC, errno.EACCES], ids=["full disk", "read-only file"])
@pytest.mark.parametrize("n", [1, 2])
def test_record_on_a_full_disk_or_a_read_only_file_leaves_both_files_as_they_were(
    n: int, error: int, pristine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _copy(pristine) as root:
        before = _snapshot(root)
        tried = _failing_at(n, error, monkeypatch)
        _refused_in_one_line(_run(_record(root)))
        assert len(tried) == n
        assert _snapshot(root) == before  # the old set, whole, and no temporary left beside it


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_merge_on_a_full_disk_leaves_the_old_report_set_whole(
    n: int, pristine: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _copy(pristine) as root:
        out = root / "merged"
        assert _run(["merge", f"{root}/reports/before", "--out", str(out)]).status == 0
        before = _snapshot(root)
        _failing_at(n, errno.ENOSPC, monkeypatch)
        _refused_in_one_line(_run(["merge", f"{root}/reports/before", f"{root}/reports/after", "--out", str(out)]))
        assert _snapshot(root) == before
        monkeypatch.undo()
        assert _run(["merge", f"{root}/reports/before", f"{root}/reports/after", "--out", str(out)]).status == 0
        assert (out / "matrix.json").read_bytes() != before["merged/matrix.json"]  # the new set, once there is room


def test_a_read_only_expectations_file_with_dry_run_is_checked_not_a_traceback(pristine: Path) -> None:
    with _copy(pristine) as root:
        for name in ("m.toml", "findings.toml"):
            (root / "expectations" / name).chmod(0o444)
        before = _snapshot(root)
        assert _run(_record(root, "0.34.0", "--dry-run")).status == 0
        _inputs_kept(before, root)


def test_two_records_at_once_keep_every_release_each_said_it_wrote(pristine: Path) -> None:
    with _copy(pristine) as root:
        statuses: dict[str, int] = {}
        start = threading.Barrier(2)

        def record(release: str) -> None:
            start.wait()
            statuses[release] = main(_record(root, release))

        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            threads = [threading.Thread(target=record, args=(release,)) for release in ("0.34.0", "0.35.0")]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        kept = {str(v) for v in load_expectations(root / "expectations" / "m.toml").releases}
        assert kept >= {release for release, status in statuses.items() if status == 0}
        assert 0 in statuses.values()


def test_a_second_writer_of_a_folder_is_told_who_holds_it(tmp_path: Path) -> None:
    with atomic.locked(tmp_path, wait=False), pytest.raises(InputError, match=r"pid \d+"):  # noqa: SIM117
        with atomic.locked(tmp_path, wait=False):
            pass
    assert list(tmp_path.iterdir()) == []  # the lock file goes with its holder
