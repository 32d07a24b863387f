"""Our own workflow rules (policy.py): kept by ci.yml and gpu-matrix.yml, caught when broken."""

from __future__ import annotations

from pathlib import Path

import pytest

# PyYAML comes with `tox -e actions`; a bare pytest elsewhere skips this module, saying so.
pytest.importorskip("yaml", reason="PyYAML is not installed here; run these tests with `tox -e actions`")

from .policy import load, problems, runner_labels, triggers

pytestmark = pytest.mark.pure

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.y*ml"))
BAD = Path(__file__).resolve().parent / "bad"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda path: path.name)
def test_our_workflows_keep_the_rules(workflow: Path) -> None:
    assert problems(workflow) == []


def test_every_broken_rule_is_named() -> None:
    assert problems(BAD / "policy_violations.yml") == [
        "top-level permissions must be {} (each job asks for what it needs)",
        "no concurrency group",
        "job gpu: no permissions of its own",
        "job gpu: no timeout-minutes",
        "job gpu: runs on a self-hosted runner in a workflow triggered by ['pull_request']",
        "line 17: actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8"
        " has no '# vX.Y.Z' comment naming its release",
    ]


def test_a_tag_instead_of_a_sha_is_named() -> None:
    assert "line 12: actions/checkout@v5 is not pinned to a full commit SHA" in problems(BAD / "unpinned_action.yml")


def test_gpu_matrix_never_runs_for_pull_requests() -> None:
    on = triggers(load(REPO / ".github" / "workflows" / "gpu-matrix.yml"))
    assert set(on) == {"push", "schedule", "workflow_dispatch"}
    assert on["push"] == {"branches": ["main"]}


def test_gpu_jobs_run_only_on_labelled_gpu_runners() -> None:
    # Every device of the matrix maps to exactly one runner label set: the shared GPU labels plus the
    # device's own, so a job can neither land on a hosted runner nor on another GPU generation.
    matrix = load(REPO / ".github" / "workflows" / "gpu-matrix.yml")["jobs"]["gpu"]["strategy"]["matrix"]
    runners = {entry["device"]: entry["runner"] for entry in matrix["include"]}
    assert set(runners) == set(matrix["device"])
    for device, labels in runners.items():
        assert labels == ["self-hosted", "linux", "x64", "gpu", device]


def test_hosted_ci_uses_no_self_hosted_runner() -> None:
    jobs = load(REPO / ".github" / "workflows" / "ci.yml")["jobs"]
    assert all("self-hosted" not in labels for job in jobs.values() for labels in runner_labels(job))


def test_gpu_runners_match_the_generations_the_expectations_claim() -> None:
    """Each GPU generation the gpu matrix lists is served by a runner, or every expectation rule
    that names only unserved generations says it is not yet observed on hardware; and the
    workflow runs only the vLLM releases the expectations were derived for."""
    import tomllib

    matrix = load(REPO / ".github" / "workflows" / "gpu-matrix.yml")["jobs"]["gpu"]["strategy"]["matrix"]
    served = {str(entry["capability"]) for entry in matrix["include"]}
    listed = set(tomllib.loads((REPO / "matrices" / "gpu.toml").read_text())["axes"]["capability"])
    assert served <= listed, f"runners for generations the gpu matrix does not list: {sorted(served - listed)}"
    expectations = tomllib.loads((REPO / "matrices" / "expectations" / "gpu.toml").read_text())
    unchecked = []
    for rule in expectations.get("expect", []):
        named = rule["when"].get("capability")
        if named is None:
            continue
        named = {named} if isinstance(named, str) else set(named)
        if not named & served and "not yet observed on hardware" not in rule["reason"]:
            unchecked.append(rule["when"])
    assert unchecked == [], f"rules no runner checks, not marked as unobserved: {unchecked}"
    # No hand pin: the releases come from the expectations' `releases` (the releases job).
    assert matrix["vllm"] == "${{ fromJSON(needs.releases.outputs.vllm) }}"


WATCH = REPO / ".github" / "workflows" / "vllm-watch.yml"


def test_the_watch_runs_on_schedule_and_on_demand_only() -> None:
    assert set(triggers(load(WATCH))) == {"schedule", "workflow_dispatch"}


def test_the_watch_uses_hosted_runners_only() -> None:
    jobs = load(WATCH)["jobs"]
    assert all("self-hosted" not in labels for job in jobs.values() for labels in runner_labels(job))


def test_only_the_publishing_job_may_write_and_it_runs_no_watched_release() -> None:
    jobs = load(WATCH)["jobs"]
    writers = {name for name, job in jobs.items() if "write" in job["permissions"].values()}
    assert writers == {"publish"}
    assert jobs["publish"]["permissions"] == {"contents": "read", "issues": "write"}
    scripts = [step.get("run", "") for step in jobs["publish"]["steps"]]
    # It installs this repository's harness and reads the deltas as data: no vLLM, no lane, nothing
    # the other jobs wrote is executed.
    for script in scripts:
        assert "vllm" not in script.replace("vllm-watch", "").lower(), script
        assert "dflash-matrix watch " not in script and "dflash-matrix run" not in script, script
        assert "bash deltas" not in script and "python deltas" not in script, script
    assert any("dflash-matrix watch-issues deltas" in script for script in scripts)


def test_the_watch_splices_no_input_into_a_script() -> None:
    # Inputs and matrix values (a nightly URL, a release) reach scripts as environment variables only.
    for job in load(WATCH)["jobs"].values():
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), step.get("name")


def test_the_watch_fans_out_the_plan_it_prints() -> None:
    jobs = load(WATCH)["jobs"]
    assert jobs["lane"]["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert jobs["lane"]["needs"] == "plan" and set(jobs["publish"]["needs"]) == {"plan", "lane"}
