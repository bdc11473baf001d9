"""The built site in headless Chromium: pages render with navigation, and search finds things.

Needs playwright (the ``docs`` extra) and a Chromium on PATH (``apt-get install -y chromium``;
playwright drives the system browser, nothing is downloaded); skips with a message otherwise.
The site is served over HTTP on 127.0.0.1, as a reader's browser would get it (search runs in a
web worker, which browsers refuse on file:// pages).
"""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if path is None:
        pytest.skip("no Chromium on PATH (apt-get install -y chromium): docs browser tests skipped")
    return path


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # no request lines in the test output
        pass


@pytest.fixture(scope="module")
def site_url(built_site: Path) -> Iterator[str]:
    handler = functools.partial(QuietHandler, directory=str(built_site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def page(site_url: str) -> Iterator[object]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed "
                                   "(pip install -e '.[docs]'): docs browser tests skipped")
    exe = chromium_path()
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox", "--disable-gpu"])
        tab = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        tab.on("pageerror", lambda exc: errors.append(str(exc)))
        tab.js_errors = errors  # type: ignore[attr-defined]
        yield tab
        browser.close()


def heading(tab) -> str:
    """The page's title without the permalink sign the toc extension appends."""
    return tab.locator("article h1").first.inner_text().replace("¶", "").strip()


def nav_titles(tab) -> list[str]:
    return [t.strip() for t in tab.locator("nav.md-nav--primary .md-nav__link").all_inner_texts() if t.strip()]


def test_index_renders_with_navigation(page, site_url: str, tmp_path: Path) -> None:
    page.goto(f"{site_url}/index.html")
    assert heading(page) == "memrl"
    titles = nav_titles(page)
    for section in ("Start", "Concepts", "Guides", "Reference", "Benchmarks"):
        assert any(section in t for t in titles), f"nav lacks {section!r}: {titles}"
    assert page.locator(".md-header").is_visible(), "the header did not render"
    page.screenshot(path=str(tmp_path / "index.png"))
    assert not page.js_errors, page.js_errors


def test_a_guide_renders_with_its_nav_entry_active(page, site_url: str) -> None:
    page.goto(f"{site_url}/guides/custom-workflow.html")
    assert "workflow" in heading(page).lower()
    active = page.locator("nav.md-nav--primary .md-nav__link--active").all_inner_texts()
    assert any("Custom workflow" in t for t in active), f"the guide's nav entry is not active: {active}"
    assert page.locator("article pre code").count() >= 1, "the guide shows no code block"
    assert not page.js_errors, page.js_errors


def test_config_reference_renders_tables(page, site_url: str) -> None:
    page.goto(f"{site_url}/reference/config.html")
    cells = page.locator("article table td code").all_inner_texts()
    for key in ("trainer.lr", "algorithm.n", "engine.vllm.sync_path", "workflow.options.chunk_tokens"):
        assert key in cells, f"{key} not in the rendered config reference"
    toc = page.locator(".md-sidebar--secondary .md-nav__link").all_inner_texts()
    assert any("trainer" in t for t in toc), f"the page's table of contents lacks the sections: {toc[:10]}"


def test_search_finds_a_page(page, site_url: str) -> None:
    """Typing in the search box lists matching pages (the search index and its web worker work)."""
    page.goto(f"{site_url}/index.html")
    page.locator("input.md-search__input").click()
    page.keyboard.type("checkpoint", delay=20)
    results = page.locator(".md-search-result__item")
    results.first.wait_for(state="visible", timeout=15000)
    assert "matching document" in page.locator(".md-search-result__meta").inner_text()
    assert "checkpoint" in results.first.inner_text().lower()
    href = results.first.locator("a").first.get_attribute("href") or ""
    assert ".html" in href, f"a search result does not link to a page: {href!r}"
