"""junit.xml as the consumers people use read it: xunit-viewer, junit2html, EnricoMi's publish action,
and the Jenkins xunit plugin's junit-10.xsd.

Scenarios are runs of the fake lane (its real cells, journal and report build; crash and timeout are
journaled as the runner journals a dead or hung cell process): one run with every verdict, a merge of
two runs (two devices, two vLLM versions, the same cell ids, different verdicts), a killed run rebuilt
from its journal, a run with a stale rule, and a green run. For each, the counts and the conclusion each
consumer derives.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pytest
import xmlschema

from harness.cli import main
from harness.expectations import describe_stale, expectations_for
from harness.journal import JournalWriter, now_iso
from harness.lanes.fake import create
from harness.matrix import expand, load_matrix
from harness.observation import Failure, Observation
from harness.result import decide
from harness.stages import Stage
from harness.verdict import FAULTS, Verdict

from .consumers import enricomi, junit2html, xunit_viewer

PLANTED_FINDING = "planted-fault"

pytestmark = pytest.mark.process

SCHEMA = xmlschema.XMLSchema(Path(__file__).parents[1] / "core" / "schemas" / "junit-10.xsd")
CELLS = [f"{b}-{c}-{s}" for b in ("A_ATTN", "B_ATTN") for c in ("causal", "noncausal") for s in ("sink", "nosink")]
# Not lane actions (they would kill this process): journaled as the runner journals a dead or hung cell.
DIED = {
    "crash": Observation("B_ATTN", failure=Failure(Stage.FORWARD, "SIGSEGV", "cell process died")),
    "timeout": Observation("B_ATTN", timed_out=True),
}


def _selector(ident: str) -> str:
    backend, causal, sink = ident.split("-")
    return (
        f'{{ backend = "{backend}", causal = {str(causal == "causal").lower()}, sink = {str(sink == "sink").lower()} }}'
    )


def fake_run(
    folder: Path,
    *,
    device: str = "fake-h100",
    vllm: str = "0.33.0",
    actions: Mapping[str, str] | None = None,
    expect: Mapping[str, str] | None = None,
    stale_rule: bool = False,
    stop_after: int | None = None,
) -> Path:
    """A fake-lane run of CELLS journaled into folder/journal, its reports built by `dflash-matrix report`.
    ``actions``: cell id -> fake action, or "crash"/"timeout"; ``expect``: cell id -> expected verdict;
    ``stop_after``: the run is killed after that many cells (no end record)."""
    folder.mkdir(parents=True)
    rules = ["[expectations]", 'default = "pass"', 'reason = "the fake lane serves every cell"']
    if stale_rule or any(Verdict(verdict) in FAULTS for verdict in (expect or {}).values()):
        # A rule expecting a fault names its finding; a finding no rule names would be refused.
        rules.append('findings = "findings.toml"')
        (folder / "findings.toml").write_text(
            f'[findings]\nrules_in = ["expect.toml"]\n[[finding]]\nid = "{PLANTED_FINDING}"\n'
            'title = "a fault planted by the test"\nkind = "upstream-bug"\nupstream = "unreported"\n'
            'vllm = ">=0"\nfirst_release = "0.1.0"\nmeasured = "planted"\n'
        )
    for ident, verdict in (expect or {}).items():
        rules += ["[[expect]]", f"when = {_selector(ident)}", f'verdict = "{verdict}"', f'reason = "planted {verdict}"']
        rules += [f'finding = "{PLANTED_FINDING}"'] if Verdict(verdict) in FAULTS else []
    if stale_rule:  # shadowed by the next rule (the last matching rule wins), so it decides no cell
        rules += ["[[expect]]", 'when = { backend = "A_ATTN" }', 'verdict = "crash"', 'reason = "old"']
        rules += [f'finding = "{PLANTED_FINDING}"']
        rules += ["[[expect]]", 'when = { backend = "A_ATTN" }', 'verdict = "pass"', 'reason = "fixed"']
    (folder / "expect.toml").write_text("\n".join(rules) + "\n")
    lane_actions = {k: v for k, v in (actions or {}).items() if k not in ("crash", "timeout") and v not in DIED}
    options = ", ".join(f'"{k}" = "{v}"' for k, v in lane_actions.items())
    (folder / "m.toml").write_text(
        '[matrix]\nname = "consumers"\nlane = "fake"\nexpectations = "expect.toml"\n'
        '[axes]\nbackend = ["A_ATTN", "B_ATTN"]\ncausal = [true, false]\nsink = [true, false]\n'
        f'[options]\ndevice = "{device}"\nvllm_version = "{vllm}"\nactions = {{ {options} }}\n'
    )
    matrix = load_matrix(folder / "m.toml")
    lane, expectations, cells = create(matrix), expectations_for(matrix), expand(matrix)
    assert [cell.id for cell in cells] == CELLS
    journal = JournalWriter(folder / "journal" / "main.jsonl")
    # As the pytest plugin records them: the stale rules go into the run record.
    run = {
        "lane": "fake",
        "matrix": "consumers",
        "started": now_iso(),
        "stale_expectations": describe_stale(expectations, cells),
    }
    assert bool(run["stale_expectations"]) == stale_rule
    journal.start(run, [cell.id for cell in cells])
    journal.env(dict(lane.environment()))
    for number, cell in enumerate(cells):
        if stop_after is not None and number == stop_after:
            journal.close()
            break
        planted = (actions or {}).get(cell.id)
        observation = DIED[planted] if planted in DIED else lane.observe(cell, lambda stage: None)
        journal.cell(decide(cell, observation, expectations.for_cell(cell)))
    else:
        journal.end()
        journal.close()
    assert main(["report", str(folder / "journal"), "--out", str(folder)]) == 0
    return folder


EVERY_VERDICT = {
    "A_ATTN-causal-nosink": "reject",  # unsupported, as expected
    "A_ATTN-noncausal-sink": "substitute",  # substituted, as expected
    "A_ATTN-noncausal-nosink": "unavailable",  # expected unsupported: changed
    "B_ATTN-causal-sink": "lose-request",  # wrong-backend: regression
    "B_ATTN-causal-nosink": "mismatch",  # regression
    "B_ATTN-noncausal-sink": "crash",  # regression
    "B_ATTN-noncausal-nosink": "timeout",  # expected crash: changed, but a hang is red
}
EVERY_EXPECTED = {
    "A_ATTN-causal-nosink": "unsupported",
    "A_ATTN-noncausal-sink": "substituted",
    "A_ATTN-noncausal-nosink": "unsupported",
    "B_ATTN-noncausal-nosink": "crash",
}


def _suite(view: Mapping[str, dict[str, str]], device: str) -> dict[str, str]:
    (name,) = [name for name in view if f"[{device} " in name]
    return view[name]


def _status(cases: Mapping[str, str], ident: str) -> str:
    (status,) = [status for key, status in cases.items() if key.endswith(f" {ident}")]
    return status


def test_every_verdict_in_one_run(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "run", actions=EVERY_VERDICT, expect=EVERY_EXPECTED)
    junit = run / "junit.xml"
    SCHEMA.validate(junit)

    viewer = xunit_viewer([junit])
    (suite,) = viewer["suites"].values()
    assert list(viewer["suites"]) == ["dflash-matrix.fake [fake-h100 · vLLM 0.33.0]"]
    assert Counter(suite.values()) == {"passed": 3, "failure": 1, "error": 4}
    assert sorted(viewer["description"].split(", ")) == ["1 failure", "3 passed", "4 error"]
    # A passing cell shows its verdict, expectation, backends and message, not just "passed".
    (shown,) = [
        m for key, m in viewer["messages"][next(iter(viewer["messages"]))].items() if "A_ATTN-causal-nosink" in key
    ]
    assert shown[0].splitlines()[0] == (
        "unsupported as expected (rule 0: planted unsupported) · requested A_ATTN · draft layers -"
        " · attention sinks not supported"
    )

    report = junit2html([junit])
    (cases,) = report["suites"].values()
    assert Counter(cases.values()) == {"passed": 3, "failed": 5}  # junit2html has no "error": it is a failure
    assert report["exit_status"] != 0

    action = enricomi([junit])
    assert (action.suite_tests, action.suite_failures, action.suite_errors, action.suite_skipped) == (8, 1, 4, 0)
    assert action.conclusion == "failure"
    levels = {a.title.split(" ")[0]: a.level for a in action.annotations}
    # Regressions, the lost request among them, are red annotations; a sideways change is a warning.
    assert levels == {
        "B_ATTN-causal-sink": "failure",
        "B_ATTN-causal-nosink": "failure",
        "B_ATTN-noncausal-sink": "failure",
        "B_ATTN-noncausal-nosink": "failure",
        "A_ATTN-noncausal-nosink": "warning",
    }


def test_a_merge_of_two_runs_keeps_each_runs_cells(tmp_path: Path) -> None:
    fake_run(tmp_path / "h100", device="fake-h100", vllm="0.33.0")
    fake_run(
        tmp_path / "b200",
        device="fake-b200",
        vllm="0.34.0",
        actions={"B_ATTN-causal-sink": "lose-request", "A_ATTN-causal-nosink": "mismatch"},
    )
    out = tmp_path / "merged"
    assert main(["merge", str(tmp_path / "h100"), str(tmp_path / "b200"), "--out", str(out), "--junit-per-run"]) == 0
    per_run = sorted(out.glob("junit-*.xml"))
    assert [p.name for p in per_run] == [
        "junit-dflash-matrix.fake-fake-b200-vLLM-0.34.0.xml",
        "junit-dflash-matrix.fake-fake-h100-vLLM-0.33.0.xml",
    ]
    for path in [out / "junit.xml", *per_run]:
        SCHEMA.validate(path)

    for files in ([out / "junit.xml"], per_run):
        viewer = xunit_viewer(files)["suites"]
        assert sorted(viewer) == [
            "dflash-matrix.fake [fake-b200 · vLLM 0.34.0]",
            "dflash-matrix.fake [fake-h100 · vLLM 0.33.0]",
        ]
        h100, b200 = _suite(viewer, "fake-h100"), _suite(viewer, "fake-b200")
        assert len(h100) == len(b200) == 8  # no cell of one run folded onto the other's
        assert set(h100.values()) == {"passed"}
        assert _status(b200, "B_ATTN-causal-sink") == "error" and _status(b200, "A_ATTN-causal-nosink") == "error"

        html = junit2html(files)
        assert sorted(html["suites"]) == sorted(viewer)
        assert set(_suite(html["suites"], "fake-h100").values()) == {"passed"}
        assert _status(_suite(html["suites"], "fake-b200"), "B_ATTN-causal-sink") == "failed"
        assert html["exit_status"] == 2  # --max-failures 1: two failed cells

        action = enricomi(files)
        assert len(action.tests) == 16, "each run's cell is its own test, not '1 out of 2 runs'"
        assert Counter(action.tests.values()) == {"success": 14, "error": 2}
        assert action.conclusion == "failure"
        titles = sorted(a.title for a in action.annotations if a.level == "failure")
        assert titles == [
            "A_ATTN-causal-nosink (fake [fake-b200 · vLLM 0.34.0].A_ATTN) with error",
            "B_ATTN-causal-sink (fake [fake-b200 · vLLM 0.34.0].B_ATTN) with error",
        ]


def test_a_killed_run_rebuilt_from_its_journal_is_red_everywhere(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "killed", stop_after=3)
    junit = run / "junit.xml"
    SCHEMA.validate(junit)

    suite = next(iter(xunit_viewer([junit])["suites"].values()))
    assert Counter(suite.values()) == {"passed": 3, "skipped": 5, "error": 1}
    assert _status(suite, "run::incomplete") == "error"

    html = junit2html([junit])
    assert Counter(next(iter(html["suites"].values())).values()) == {"passed": 3, "skipped": 5, "failed": 1}
    assert html["exit_status"] != 0

    action = enricomi([junit])
    assert action.conclusion == "failure", "a killed run is never a green check"
    assert [(a.level, a.title) for a in action.annotations] == [
        ("failure", "run::incomplete (fake [fake-h100 · vLLM 0.33.0].run) with error")
    ]


def test_a_stale_rule_fails_the_run_everywhere(tmp_path: Path) -> None:
    run = fake_run(tmp_path / "stale", stale_rule=True)
    junit = run / "junit.xml"
    SCHEMA.validate(junit)
    suite = next(iter(xunit_viewer([junit])["suites"].values()))
    assert Counter(suite.values()) == {"passed": 8, "failure": 1}
    assert junit2html([junit])["exit_status"] != 0
    action = enricomi([junit])
    assert action.conclusion == "failure" and action.suite_failures == 1


def test_a_run_with_every_cell_as_expected_is_green_everywhere(tmp_path: Path) -> None:
    run = fake_run(
        tmp_path / "green", actions={"A_ATTN-causal-sink": "reject"}, expect={"A_ATTN-causal-sink": "unsupported"}
    )
    junit = run / "junit.xml"
    SCHEMA.validate(junit)
    suite = next(iter(xunit_viewer([junit])["suites"].values()))
    assert set(suite.values()) == {"passed"} and len(suite) == 8
    assert junit2html([junit])["exit_status"] == 0
    action = enricomi([junit])
    assert action.conclusion == "success" and action.annotations == ()


def test_suite_names_that_would_collide_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = fake_run(tmp_path / "run")
    # A JUnit file naming no run (no properties) whose suite bears the name this run's suite gets.
    (tmp_path / "foreign.xml").write_text(
        '<testsuites><testsuite name="dflash-matrix.fake [fake-h100 · vLLM 0.33.0]" tests="1" failures="0" errors="0">'
        '<testcase name="x" classname="y"/></testsuite></testsuites>'
    )
    out = tmp_path / "out"
    assert main(["merge", str(run / "matrix.json"), str(tmp_path / "foreign.xml"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "would share the suite name" in err
    assert not out.exists()


@pytest.mark.skipif(not os.environ.get("DFLASH_ENRICOMI_SOURCE"), reason="the action's source is not in CI")
def test_the_rereading_of_enricomi_agrees_with_the_action(tmp_path: Path) -> None:
    """With DFLASH_ENRICOMI_SOURCE = the action's python/ folder at v2.23.0 (git archive of the tag)."""
    runs = [
        fake_run(tmp_path / "every", actions=EVERY_VERDICT, expect=EVERY_EXPECTED),
        fake_run(tmp_path / "b200", device="fake-b200", vllm="0.34.0", actions={"B_ATTN-causal-sink": "mismatch"}),
        fake_run(tmp_path / "killed", stop_after=2),
    ]
    for files in ([run / "junit.xml"] for run in runs):
        assert enricomi(files, reread=True) == enricomi(files)
    together = [run / "junit.xml" for run in runs]
    assert enricomi(together, reread=True) == enricomi(together)
