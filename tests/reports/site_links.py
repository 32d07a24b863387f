"""Every link of a built site, read from its HTML with the standard library's parser: what the tests
hold to "every link resolves to a file in the folder, and to an element of that file"."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(str(values["id"]))
        if tag == "a" and values.get("href") is not None:
            self.links.append(str(values["href"]))


def read_page(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def broken_links(folder: Path) -> list[str]:
    """``page: href (why)`` for each link that leaves the folder or names a file or an id it lacks."""
    pages = {path.resolve(): read_page(path) for path in sorted(folder.rglob("*.html"))}
    broken = []
    for path, page in pages.items():
        for href in page.links:
            parts = urlsplit(href)
            if parts.scheme or parts.netloc or href.startswith("/"):
                broken.append(f"{path.name}: {href} (not relative)")
                continue
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if folder.resolve() not in target.parents or not target.is_file():
                broken.append(f"{path.name}: {href} (no such file in the folder)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in pages[target].ids:
                broken.append(f"{path.name}: {href} (no element with that id)")
    return broken


def link_count(folder: Path) -> int:
    return sum(len(read_page(path).links) for path in folder.rglob("*.html"))
