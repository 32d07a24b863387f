"""matrix.html in a real browser: Debian's Chromium, driven by Playwright (chromium.py says when it skips)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.cli import main
from harness.reports.build import render_reports
from harness.reports.inputs import load_inputs
from harness.reports.merge import merge

from .shards import DEFAULT_ENV, cell, write_journal, write_shard

pytestmark = pytest.mark.process

HOSTILE = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
HOSTILE_DEVICE = "GPU <i>x</i> </script>"
B200 = {**DEFAULT_ENV, "device": "NVIDIA B200"}
PAGE = 200  # rows the page draws before "show more"


@pytest.fixture(scope="module")
def report_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("html")
    h100 = [cell(verdict="crash", expected="pass", message=HOSTILE), cell(sink=True, verdict="unsupported")]
    h100 += [cell("TRITON_ATTN", sliding_window=window) for window in range(1, 250)]
    b200 = [cell(), cell(sink=True), cell("FLEX_ATTENTION", sink=True, verdict="unsupported", claim=True)]
    shards = [
        write_shard(root / "h100", h100, env={**DEFAULT_ENV, "device": HOSTILE_DEVICE}),
        write_shard(root / "b200", b200, env=B200),
    ]
    report = merge(load_inputs(shards))
    page = root / "matrix.html"
    page.write_bytes(render_reports(report)["matrix.html"])
    return page


@pytest.fixture()
def page(browser: Any, report_page: Path) -> Iterator[Any]:
    opened = browser.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    opened.goto(report_page.as_uri())
    yield opened
    opened.close()
    assert problems == []


def _rows(page: Any) -> int:
    return int(page.locator("#cells tbody tr").count())


def test_markup_in_test_output_is_shown_as_text(page: Any) -> None:
    assert page.evaluate("window.__pwned") is None
    assert page.locator("img").count() == 0
    message = page.locator("#cells td.msg", has_text="onerror").first
    assert message.inner_text() == HOSTILE
    entry = page.locator("td.entry.v-crash").first
    assert HOSTILE in (entry.get_attribute("title") or "")
    entry.locator("summary").click()
    assert HOSTILE in entry.inner_text()
    assert page.locator(".grid th.col", has_text=HOSTILE_DEVICE).count() == 1
    assert page.locator("#runs td", has_text=HOSTILE_DEVICE).count() == 1


def test_verdict_filter_narrows_the_cell_list_and_dims_the_grid(page: Any) -> None:
    assert page.inner_text("#count-total") == "254"
    assert _rows(page) == PAGE
    page.select_option("#f-verdict", "unsupported")
    assert page.inner_text("#count-matching") == "2" and _rows(page) == 2
    assert page.locator(".grid td.entry.dim").count() == page.locator(".grid td.entry").count() - 2
    page.select_option("#f-verdict", "crash")
    assert _rows(page) == 1
    assert page.locator("#cells tbody td", has_text="regression").count() == 1


def test_backend_device_and_claim_filters(page: Any) -> None:
    page.select_option("#f-backend", "FLEX_ATTENTION")
    assert _rows(page) == 1
    assert page.locator(".grid-row:visible").count() == 1
    page.select_option("#f-backend", "")
    page.select_option("#f-device", "NVIDIA B200")
    assert _rows(page) == 3
    assert page.locator(".grid th.col:visible").count() == 1
    page.select_option("#f-gap", "over-claim")
    assert _rows(page) == 1 and "over-claim" in page.inner_text("#cells tbody tr")


def test_search_and_paging(page: Any) -> None:
    page.fill("#f-text", "swa12")  # swa12, swa120..swa129
    assert _rows(page) == 11
    page.fill("#f-text", "")
    assert _rows(page) == PAGE
    page.click("#more")
    assert _rows(page) == 254 and page.inner_text("#count-shown") == "254"
    assert page.locator("#more").is_hidden()


@pytest.fixture(scope="module")
def single_run_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """matrix.html of one run, as `dflash-matrix report` rebuilds it from a killed run's journal."""
    root = tmp_path_factory.mktemp("single")
    cells = [cell(), cell(sink=True, verdict="unsupported"), cell("TRITON_ATTN", verdict="mismatch", expected="pass")]
    planned = [c.id for c in cells] + ["FLEX_ATTENTION-causal-nosink"]
    journal = write_journal(root / "journal" / "gw0.jsonl", cells, planned=planned, ended=False)
    assert main(["report", str(journal), "--out", str(root / "out")]) == 0
    return root / "out" / "matrix.html"


def test_a_single_run_writes_its_own_page(browser: Any, single_run_page: Path) -> None:
    opened = browser.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda error: problems.append(str(error)))
    opened.goto(single_run_page.as_uri())
    assert problems == []
    assert opened.inner_text("#count-total") == "3" and _rows(opened) == 3
    # The run was killed: the page says so before anything else, and the runs table names its state.
    assert "did not complete" in opened.inner_text("#incomplete")
    assert opened.inner_text("#runs td.state") == "killed or timed out"
    assert opened.locator(".grid th.col", has_text="NVIDIA H100 · vLLM 0.33.0").count() == 1
    opened.select_option("#f-outcome", "missed")
    assert _rows(opened) == 1 and "mismatch" in opened.inner_text("#cells tbody tr")
    opened.close()
