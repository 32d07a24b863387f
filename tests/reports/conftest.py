from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under GitHub Actions the commands append to the job summary; tests must not write theirs into CI's.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
