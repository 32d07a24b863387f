"""This project's own rules for its workflows, beyond what the three linters check.

The linters know GitHub Actions in general; these rules are the promises our README makes about
our workflows: least privilege per job, bounded jobs, SHA-pinned actions that say which release
they are, and GPU runners that never see a pull request.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

# `uses: owner/repo[/path]@<40 hex> # v1.2.3`: the SHA is what runs, the comment is what a reviewer
# and Dependabot read. Local actions (./...) and docker:// images are not third-party releases.
USES_LINE = re.compile(r"^\s*(?:-\s+)?uses:\s*(?P<ref>\S+)(?P<rest>.*)$")
PINNED_REF = re.compile(r"^[\w.-]+/[\w.-]+(?:/[\w./-]+)?@[0-9a-f]{40}$")
VERSION_COMMENT = re.compile(r"^\s+#\s+v\d+(?:\.\d+)*\b")

# Pull-request events would run a fork's code on our hosts if they reached a self-hosted runner.
PR_EVENTS = frozenset({"pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment"})


def load(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(document, dict):
        raise ValueError(f"{path}: a workflow must be a mapping")
    return document


def triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 reads a bare `on` key as the boolean True.
    on = workflow.get("on", workflow.get(True))
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on or {})


def runner_labels(job: dict[str, Any]) -> list[list[str]]:
    """Every label set a job may run on, expanding `runs-on: ${{ matrix.runner }}` through the matrix."""
    runs_on = job.get("runs-on")
    if isinstance(runs_on, str) and runs_on.replace(" ", "") == "${{matrix.runner}}":
        matrix = job.get("strategy", {}).get("matrix", {})
        entries = [entry["runner"] for entry in matrix.get("include", []) if "runner" in entry]
        entries += matrix.get("runner", [])
        return [[entry] if isinstance(entry, str) else list(entry) for entry in entries]
    if isinstance(runs_on, str):
        return [[runs_on]]
    return [list(runs_on or [])]


def problems(path: Path) -> list[str]:
    """Every rule the workflow at `path` breaks, one line each (empty: it keeps them all)."""
    workflow = load(path)
    found: list[str] = []
    if workflow.get("permissions") != {}:
        found.append("top-level permissions must be {} (each job asks for what it needs)")
    if "concurrency" not in workflow:
        found.append("no concurrency group")
    on = triggers(workflow)
    for name, job in (workflow.get("jobs") or {}).items():
        if not isinstance(job.get("permissions"), dict):
            found.append(f"job {name}: no permissions of its own")
        if "timeout-minutes" not in job:
            found.append(f"job {name}: no timeout-minutes")
        self_hosted = any("self-hosted" in labels for labels in runner_labels(job))
        if self_hosted and PR_EVENTS & on.keys():
            found.append(
                f"job {name}: runs on a self-hosted runner in a workflow triggered by {sorted(PR_EVENTS & on.keys())}"
            )
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = USES_LINE.match(line)
        if match is None or match["ref"].startswith(("./", "docker://")):
            continue
        if not PINNED_REF.match(match["ref"]):
            found.append(f"line {number}: {match['ref']} is not pinned to a full commit SHA")
        elif not VERSION_COMMENT.match(match["rest"]):
            found.append(f"line {number}: {match['ref']} has no '# vX.Y.Z' comment naming its release")
    return found
