"""The docs site builds in strict mode (no broken links, nav entries or anchors), and the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

from tests.docs.blocks import DOCS, REPO

PAGES = ["index.html", "start/install.html", "start/demo.html", "start/memagent.html", "start/tool-agent.html",
         "guides/custom-workflow.html", "guides/custom-reward.html", "concepts/episodes.html",
         "concepts/training-step.html", "reference/config.html", "reference/cli.html",
         "reference/algorithms.html", "reference/rollout-format.html", "benchmarks.html", "CHANGELOG.html"]


def test_strict_build_has_every_page(built_site: Path) -> None:
    missing = [p for p in PAGES if not (built_site / p).is_file()]
    assert not missing, f"pages missing from the built site: {missing}"
    assert (built_site / "search" / "search_index.json").is_file(), "the search index was not built"


def test_site_loads_nothing_from_the_network(built_site: Path) -> None:
    """The site renders offline: no fonts, scripts or styles from another host."""
    html = (built_site / "index.html").read_text(encoding="utf-8")
    remote = re.findall(r'<(?:link|script)[^>]+(?:href|src)="(https?://[^"]+)"', html)
    assert not remote, f"index.html loads from the network: {remote}"


def test_readme_is_short_and_links_resolve() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = readme.count("\n") + (not readme.endswith("\n"))
    assert lines <= 150, f"README.md has {lines} lines (at most 150: move details into docs/)"
    links = re.findall(r"\]\(((?:docs|examples|configs)/[^)#\s]+)", readme)
    assert len(links) >= 10, f"README.md should link into docs/ (found {len(links)} links)"
    broken = [link for link in links if not (REPO / link).exists()]
    assert not broken, f"README.md links to missing files: {broken}"


def test_every_doc_page_is_in_the_nav() -> None:
    """A page left out of mkdocs.yml's nav is unreachable on the site (MkDocs only reports it at INFO level)."""
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert pages, "no pages under docs/"
    left_out = [p for p in pages if f": {p}" not in nav]
    assert not left_out, f"docs pages missing from mkdocs.yml nav: {left_out}"


def test_shown_examples_match_their_files() -> None:
    """The workflow code the README and the guide show is the example that a test trains, word for word."""
    for example in ("say_word.py", "recall.py"):
        source = (REPO / "examples" / "custom_workflow" / example).read_text(encoding="utf-8")
        code = source[source.index("\nfrom ") + 1:].strip()  # past the module docstring
        shown_in = [p for p in (REPO / "README.md", DOCS / "guides" / "custom-workflow.md")
                    if code in p.read_text(encoding="utf-8")]
        assert shown_in, f"examples/custom_workflow/{example} changed: update the code shown in README.md / the guide"
    assert "class SayWord" in (REPO / "README.md").read_text(encoding="utf-8")
    config = (REPO / "examples" / "custom_workflow" / "config.yaml").read_text(encoding="utf-8")
    assert config[config.index("model:"):] in (DOCS / "guides" / "custom-workflow.md").read_text(encoding="utf-8"), \
        "examples/custom_workflow/config.yaml changed: update the YAML shown in docs/guides/custom-workflow.md"
