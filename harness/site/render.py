"""The site's files: every page of a ``Site`` as HTML (Jinja, autoescaped), by its path in the folder.

Output is deterministic (no build time, no random nonce: each page's one inline script is allowed by
its SHA-256 in the page's Content-Security-Policy), links are relative, and nothing is fetched: the
folder opens from file:// as it is published. What a page's script reads is shipped as JSON in a
``<script type="application/json">`` block written with Jinja's ``tojson`` (which escapes ``<``, ``>``
and ``&``), strings interned in a table, as matrix.html does.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from collections.abc import Sequence
from importlib import resources
from typing import Any

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup

from harness.reports.device_grid import SYMBOLS
from harness.site.pages import LanePage, Site, SiteCell, finding_file, grid, tally
from harness.verdict import VERDICT_ORDER

GENERATOR = "dflash-matrix site"
# How the form and the filters name an axis; an axis not named here shows its own name.
LABELS = {
    "method": "draft method",
    "causal": "causal",
    "sink": "attention sinks",
    "sliding_window": "sliding window",
    "layers": "layer layout",
    "head_size": "head size",
    "dtype": "dtype",
    "kv_cache_dtype": "KV-cache dtype",
    "draft_kv_cache_dtype": "draft KV-cache dtype",
    "target_attention": "target attention",
    "target_model": "target model",
    "target_dtype": "target dtype",
    "target_head": "target heads",
    "block_size": "block size",
    "loader": "model runner (loader)",
    "cudagraph": "CUDA graphs",
    "context": "context",
    "flashinfer_cubin": "FlashInfer cubins",
}


@functools.lru_cache(maxsize=1)
def _environment() -> Environment:
    return Environment(
        loader=PackageLoader("harness.site", "templates"),
        autoescape=select_autoescape(enabled_extensions=("html", "j2"), default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )


@functools.cache
def _script(name: str) -> tuple[Markup, str]:
    """A page script and the CSP source that allows exactly it."""
    text = resources.files("harness.site").joinpath("templates", name).read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")
    return Markup(text), f"sha256-{digest}"  # our own file, not data: it is the script itself


def _render(template: str, script: str | None = None, **values: Any) -> bytes:
    code, source = _script(script) if script else (None, None)
    page = _environment().get_template(template).render(
        generator=GENERATOR,
        script=code,
        script_hash=source,
        labels=LABELS,
        symbols=SYMBOLS,
        finding_href=finding_file,
        **values,
    )
    # A message may hold a lone surrogate (a journal's exception text): written as "?", as matrix.html does.
    return page.encode("utf-8", "replace")


class _Strings:
    """An interning table: the same verdict, value or message across thousands of cells is stored once."""

    def __init__(self) -> None:
        self.table: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        return self.table.setdefault(text, len(self.table))

    def list(self) -> list[str]:
        return list(self.table)


def _common(axes: Sequence[str]) -> dict[str, Any]:
    return {
        "axes": list(axes),
        "verdicts": [verdict.value for verdict in VERDICT_ORDER],
        "symbols": {verdict.value: symbol for verdict, symbol in SYMBOLS.items()},
    }


def _observed(strings: _Strings, item: SiteCell) -> int:
    return strings(", ".join(item.cell.observed_backends)) if item.cell.observed_backends else -1


def index_data(site: Site) -> dict[str, Any]:
    """Per cell: page, generation, backend, verdict, draft layers' backends, permalink, filter values."""
    strings = _Strings()
    position = {page.slug: index for index, page in enumerate(site.pages)}
    cells = [
        [
            position[item.page],
            strings(item.generation),
            strings(item.backend),
            strings(item.cell.verdict.value),
            _observed(strings, item),
            strings(item.href),
            [strings(value) for _, value in item.options],
        ]
        for item in site.cells
    ]
    pages = [{"lane": page.lane, "release": page.release, "href": page.href} for page in site.pages]
    axes = [item.axis for item in site.filters]
    return {**_common(axes), "pages": pages, "cells": cells, "strings": strings.list()}


def lane_data(page: LanePage, axes: Sequence[str]) -> dict[str, Any]:
    """Per cell, in the cell list's order: generation and backend (the grid's indices), verdict,
    draft layers' backends, and its values of the site's filter axes (``axes``)."""
    strings = _Strings()
    generations = {name: index for index, name in enumerate(page.generations)}
    backends = {name: index for index, name in enumerate(page.backends)}
    cells = [
        [
            generations[item.generation],
            backends[item.backend],
            strings(item.cell.verdict.value),
            _observed(strings, item),
            [strings(value) for _, value in item.options],
        ]
        for item in page.cells
    ]
    return {**_common(axes), "cells": cells, "strings": strings.list()}


def _verdict_line(cells: Sequence[SiteCell]) -> str:
    return ", ".join(f"{verdict.value} {count}" for verdict, count in reversed(tally(cells).counts))


def render_site(site: Site) -> dict[str, bytes]:
    """Every page, by its path relative to the site's folder."""
    axes = [item.axis for item in site.filters]
    files = {
        "index.html": _render(
            "index.html.j2",
            "index.js",
            site=site,
            data=index_data(site),
            cell_total=len(site.cells),
            summaries={page.slug: _verdict_line(page.cells) for page in site.pages},
        )
    }
    for page in site.pages:
        counts = {run.key: sum(1 for item in page.cells if item.run.key == run.key) for run in page.runs}
        files[page.href] = _render(
            "lane.html.j2",
            "lane.js",
            page=page,
            data=lane_data(page, axes),
            grid=grid(page, {}),
            legend=[(verdict.value, SYMBOLS[verdict]) for verdict in VERDICT_ORDER],
            counts=counts,
            runs=list(zip(page.runs, page.states, strict=True)),
        )
        files[page.cells_href] = _render("cells.html.j2", page=page)
    for finding in site.findings:
        files[finding.href] = _render("finding.html.j2", page=finding)
    pages = {page.release: page.href for page in site.pages}
    for change in site.changes:
        lane_pages = {page.release: page.href for page in site.pages if page.lane == change.lane}
        files[change.href] = _render("changes.html.j2", page=change, pages={**pages, **lane_pages})
    return files
