from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .chromium import browser_or_skip


@pytest.fixture(autouse=True)
def _no_step_summary(monkeypatch: pytest.MonkeyPatch) -> None:
    # Under GitHub Actions the commands append to the job summary; tests must not write theirs into CI's.
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium under Playwright, one per test module (the browser tests of matrix.html and
    of the site); skips where either is missing, unless the env requires them."""
    sync_playwright, chromium = browser_or_skip()
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium, headless=True)
        yield launched
        launched.close()
