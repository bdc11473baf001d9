"""The docs site built once per test session (MkDocs, strict), shared by the build and browser tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import REPO


def mkdocs_missing() -> str | None:
    """Why the site cannot be built here, or None."""
    try:
        import material  # noqa: F401  (the theme)
        import mkdocs  # noqa: F401
    except ImportError:
        return "mkdocs-material is not installed (pip install -e '.[docs]'): docs build tests skipped"
    return None


def build_site(out: Path) -> subprocess.CompletedProcess[str]:
    """``mkdocs build --strict`` of the checkout into ``out`` (no network: the theme's fonts are off).

    Not ``-q``: MkDocs counts warnings for ``--strict`` only when they are logged, so a quiet build
    passes with broken links.
    """
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
                           "-d", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prebuilt = os.environ.get("MEMRL_DOCS_SITE")  # a site already built (make docs): check it as it is
    if prebuilt:
        return Path(prebuilt)
    why = mkdocs_missing()
    if why:
        pytest.skip(why)
    out = tmp_path_factory.mktemp("site")
    r = build_site(out)
    assert r.returncode == 0, f"mkdocs build --strict failed:\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    return out
