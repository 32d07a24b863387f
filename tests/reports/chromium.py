"""Debian's Chromium driven by Playwright (no browser download), for the report tests that open pages.

Skipped where Playwright or Chromium is missing, except under DFLASH_REQUIRE_BROWSER=1 (the tox
`reports` env, which installs both): there a missing browser fails the run.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import pytest


def browser_or_skip() -> tuple[Any, str]:
    """Playwright's ``sync_playwright`` and the Chromium executable to launch with it."""
    required = os.environ.get("DFLASH_REQUIRE_BROWSER") == "1"
    chromium = os.environ.get("DFLASH_CHROMIUM") or shutil.which("chromium")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if required:
            pytest.fail("DFLASH_REQUIRE_BROWSER=1 but the playwright package is not installed")
        pytest.skip("the playwright package is not installed (tox -e reports installs it)")
    if not chromium:
        if required:
            pytest.fail("DFLASH_REQUIRE_BROWSER=1 but no chromium executable (apt-get install -y chromium)")
        pytest.skip("no chromium executable (tox -e reports installs Debian's chromium)")
    return sync_playwright, chromium
