"""The compatibility site in a real browser (Debian's Chromium through Playwright; chromium.py says when
it skips): index.html opened from file:// answers the question for three deployments of the planted
reports (site_plants.py says what each answer must be, read off the cells), the lane page's filters
redraw the grid, every link of every page (also those the scripts draw) is a file in the folder, and
no page asks for anything but its own files."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from harness.cli import main

from .site_links import read_page
from .site_plants import write_site_reports

pytestmark = pytest.mark.process


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("site-browser")
    reports = write_site_reports(root / "reports")
    assert main(["site", *map(str, reports.values()), "--out", str(root / "site")]) == 0
    return root / "site"


@pytest.fixture()
def opened(browser: Any, site: Path) -> Iterator[Any]:
    """A fresh tab that records page errors and every request that is not one of the site's files."""
    tab = browser.new_page()
    problems: list[str] = []
    tab.on("pageerror", lambda error: problems.append(str(error)))
    tab.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    tab.on("request", lambda request: None if request.url.startswith("file://") else problems.append(request.url))
    yield tab
    tab.close()
    assert problems == []


def _ask(tab: Any, release: str, generation: str, **options: str) -> None:
    tab.select_option("#q-release", release)
    tab.select_option("#q-generation", generation)
    for axis, value in options.items():
        tab.select_option(f"#q-{axis}", value)


def _answer(tab: Any) -> tuple[str, dict[str, str]]:
    section = tab.locator("section.lane-answer[data-lane='selection']")
    rows = section.locator("tr[data-backend]")
    verdicts = {
        str(rows.nth(i).get_attribute("data-backend")): rows.nth(i).locator("td.verdicts").inner_text().split(" ", 1)[1]
        for i in range(rows.count())
    }
    return section.locator("p.serves").inner_text(), verdicts


def test_the_index_answers_three_deployments(opened: Any, site: Path) -> None:
    opened.goto((site / "index.html").as_uri())
    # 1. vLLM 0.33.0 on SM90, a causal draft with sinks.
    _ask(opened, "0.33.0", "SM90", causal="true", sink="true")
    serves, verdicts = _answer(opened)
    assert serves == "Serves your draft: auto (vLLM picks FLASH_ATTN), FLASH_ATTN, TRITON_ATTN"
    assert verdicts == {
        "auto": "pass 1",
        "FLASH_ATTN": "pass 1",
        "TRITON_ATTN": "pass 1",
        "FLASHINFER": "unsupported 1",
    }
    # 2. The same draft on vLLM 0.34.0: FLASH_ATTN refuses sinks there, and auto moved to TRITON_ATTN.
    opened.select_option("#q-release", "0.34.0")
    serves, verdicts = _answer(opened)
    assert serves == "Serves your draft: auto (vLLM picks TRITON_ATTN), TRITON_ATTN"
    assert verdicts["FLASH_ATTN"] == "unsupported 1"
    # 3. vLLM 0.33.0 on SM100, a non-causal DSpark draft with fp8 KV: TRITON_ATTN only, FLASH_ATTN crashes.
    _ask(opened, "0.33.0", "SM100", causal="false", sink="", method="dspark", kv_cache_dtype="fp8")
    serves, verdicts = _answer(opened)
    assert serves == "Serves your draft: TRITON_ATTN"
    assert verdicts == {"TRITON_ATTN": "pass 1", "FLASHINFER": "unsupported 1", "FLASH_ATTN": "crash 1"}
    crash = opened.locator("tr[data-backend='FLASH_ATTN'] a").first
    crash.click()
    assert opened.url.endswith("selection-0.33.0-cells.html#sm100-FLASH_ATTN-dspark-noncausal-sink-kv-fp8")
    assert "RuntimeError: planted" in opened.locator("section.cell:target").inner_text()


def test_a_question_is_a_link(opened: Any, site: Path) -> None:
    opened.goto((site / "index.html").as_uri() + "#release=0.34.0&generation=SM90&causal=true&sink=true")
    assert _answer(opened)[1]["FLASH_ATTN"] == "unsupported 1"
    opened.select_option("#q-generation", "SM100")
    assert "generation=SM100" in opened.url


def test_a_question_no_cell_answers_says_so(opened: Any, site: Path) -> None:
    opened.goto((site / "index.html").as_uri())
    _ask(opened, "0.32.0", "SM90")
    assert opened.locator("#answer p.none").count() == 1
    _ask(opened, "0.32.0", "CPU x86_64")
    assert opened.locator("section.lane-answer[data-lane='cpu'] tr[data-backend='CPU_ATTN'] td.verdicts").inner_text()


def test_the_lane_filters_redraw_the_grid_and_the_cell_list(opened: Any, site: Path) -> None:
    opened.goto((site / "selection-0.33.0.html").as_uri())
    assert opened.inner_text("#grid-count") == "9"
    opened.select_option("#f-sink", "false")
    assert opened.inner_text("#grid-count") == "2"
    assert opened.locator("#cells tbody tr:visible").count() == 2
    flashinfer = opened.locator("#grid tr", has_text="FLASHINFER").locator("td").first
    assert flashinfer.inner_text().endswith("pass 1\nFLASHINFER")
    opened.select_option("#f-sink", "")
    assert "unsupported 1" in flashinfer.inner_text()


def test_every_link_of_every_page_is_a_file_in_the_folder(opened: Any, site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) == 9
    checked = 0
    for path in pages:
        opened.goto(path.as_uri())
        if path.name == "index.html":
            _ask(opened, "0.33.0", "SM90")  # the answer's links too
        for href in opened.eval_on_selector_all("a[href]", "links => links.map(link => link.href)"):
            parts = urlsplit(href)
            target = Path(unquote(parts.path))
            assert parts.scheme == "file" and site.resolve() in target.resolve().parents, href
            assert target.is_file(), href
            if parts.fragment and target.suffix == ".html":
                assert unquote(parts.fragment) in read_page(target).ids, href
            checked += 1
    assert checked > 50
