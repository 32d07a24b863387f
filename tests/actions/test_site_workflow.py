"""site.yml publishes to GitHub Pages: only its deploy job may write Pages or mint an OIDC token, and
the job that reads other runs' artifacts and builds the site can write nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("yaml", reason="PyYAML is not installed here; run these tests with `tox -e actions`")

from .policy import load

pytestmark = pytest.mark.pure

WORKFLOWS = Path(__file__).resolve().parents[2] / ".github" / "workflows"
PUBLISHING = {"pages": "write", "id-token": "write"}


def test_only_the_deploy_job_may_publish() -> None:
    holders = [
        (workflow.name, name)
        for workflow in sorted(WORKFLOWS.glob("*.y*ml"))
        for name, job in (load(workflow).get("jobs") or {}).items()
        if any(job.get("permissions", {}).get(scope) == level for scope, level in PUBLISHING.items())
    ]
    assert holders == [("site.yml", "deploy")]
    assert load(WORKFLOWS / "site.yml")["jobs"]["deploy"]["permissions"] == PUBLISHING


def test_the_build_job_writes_nothing() -> None:
    build = load(WORKFLOWS / "site.yml")["jobs"]["build"]
    assert build["permissions"] == {"contents": "read", "actions": "read"}
    assert "dflash-matrix site" in "\n".join(step.get("run", "") for step in build["steps"])
