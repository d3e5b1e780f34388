"""Every internal link in the built HTML resolves to a page (and anchor) that exists."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag in ("script", "img") and a.get("src"):
            self.links.append(a["src"])
        if tag == "link" and a.get("href"):
            self.links.append(a["href"])


def _parse(path: Path) -> _Collect:
    c = _Collect()
    c.feed(path.read_text(encoding="utf-8"))
    return c


def test_internal_links_resolve(built_book):
    pages = {p: _parse(p) for p in built_book.rglob("*.html") if "_static" not in p.parts}
    broken = []
    for page, parsed in pages.items():
        for href in parsed.links:
            url = urlparse(href)
            if url.scheme in ("http", "https", "mailto", "data", "javascript") or url.netloc:
                continue
            target_path, anchor = urldefrag(href)
            target = (page.parent / unquote(urlparse(target_path).path)).resolve() if target_path else page
            if not target.exists():
                broken.append(f"{page.relative_to(built_book)} → {href}")
            elif anchor and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if anchor not in ids:
                    broken.append(f"{page.relative_to(built_book)} → {href} (no #{anchor})")
    assert not broken, "\n".join(broken[:30])


def test_no_page_loads_anything_from_outside(built_book):
    offenders = []
    for page in built_book.rglob("*.html"):
        parsed = _Collect()
        text = page.read_text(encoding="utf-8")
        parsed.feed(text)
        for tag_src in parsed.links:
            if tag_src.startswith(("http://", "https://", "//")) and (
                    tag_src.endswith((".js", ".css")) or ".js?" in tag_src or ".css?" in tag_src):
                offenders.append(f"{page.name}: {tag_src}")
    assert not offenders, offenders
