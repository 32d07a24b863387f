"""matrix.html without a browser: self-contained, escaped, and the embedded data cannot end its block."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.reports.build import render_reports
from harness.reports.inputs import load_inputs
from harness.reports.merge import merge

from .shards import DEFAULT_ENV, cell, write_shard

pytestmark = pytest.mark.pure

HOSTILE = '</script><script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'


def _html(tmp_path: Path) -> str:
    shard = write_shard(
        tmp_path / "a",
        [cell(verdict="crash", expected="pass", message=HOSTILE), cell(sink=True)],
        env={**DEFAULT_ENV, "device": "GPU <b>bold</b> & </script>"},
    )
    report = merge(load_inputs([shard]))
    return render_reports(report)["matrix.html"].decode()


def test_the_page_loads_nothing_from_anywhere(tmp_path: Path) -> None:
    html = _html(tmp_path)
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:)?//""", html)
    assert "<link" not in html and "@import" not in html
    assert re.search(r"<script(?![^>]*\bsrc=)[^>]*>", html)


def test_test_output_never_appears_as_markup(tmp_path: Path) -> None:
    html = _html(tmp_path)
    assert "<img" not in html
    assert "<b>bold</b>" not in html and "GPU &lt;b&gt;bold&lt;/b&gt; &amp; &lt;/script&gt;" in html
    # Exactly the page's own two script blocks end: no message closed one early.
    assert html.count("</script>") == 2


def test_the_embedded_data_holds_the_exact_text(tmp_path: Path) -> None:
    html = _html(tmp_path)
    block = re.search(r'<script type="application/json" id="cell-data">(.*?)</script>', html, re.S)
    assert block is not None
    data = json.loads(block.group(1))
    assert HOSTILE in data["strings"]
    assert len(data["cells"]) == 2 and len(data["cells"][0]) == len(data["fields"])
