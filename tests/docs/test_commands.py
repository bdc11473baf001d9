"""The command blocks of the quickstarts and guides: all marked, and the runnable ones run.

``<!-- run -->`` blocks run here at tiny scale (all pages together well under a minute on two
CPU cores); ``<!-- run: slow -->`` blocks (a few tiny training and eval runs) run with
MEMRL_SLOW=1; ``<!-- skip: reason -->`` blocks need a GPU, the network, a server or hours.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.blocks import REPO, SKIP_REASONS, Block, checked_pages, command_blocks


def test_every_command_block_is_marked() -> None:
    pages = checked_pages()
    assert len(pages) >= 8, f"expected the quickstarts and guides under docs/, found {len(pages)} pages"
    unmarked = [f"docs/{b.page}:{b.line}" for p in pages for b in command_blocks(p) if b.mark is None]
    assert not unmarked, ("command blocks without <!-- run -->, <!-- run: slow --> or <!-- skip: reason --> "
                          f"before them: {unmarked}")
    bad = [f"docs/{b.page}:{b.line} ({b.mark})" for p in pages for b in command_blocks(p)
           if b.mark.startswith("skip") and b.skip_reason not in SKIP_REASONS]
    assert not bad, f"skip markers must start with one of {sorted(SKIP_REASONS)}: {bad}"


def test_the_quickstarts_have_runnable_commands() -> None:
    """A quickstart whose every command is skipped checks nothing: each has some that run."""
    for name in ("install.md", "memagent.md", "tool-agent.md"):
        page = REPO / "docs" / "start" / name
        assert any(b.runs_slow for b in command_blocks(page)), f"docs/start/{name} has no runnable command block"


def run_blocks(page_blocks: list[Block], work: Path, timeout: float) -> None:
    """Run a page's blocks in order in ``work``; fail naming the block and showing its output."""
    for name in ("configs", "examples"):
        (work / name).symlink_to(REPO / name)
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    for block in page_blocks:
        r = subprocess.run(["bash", "-euo", "pipefail", "-c", block.code], cwd=work, env=env,
                           capture_output=True, text=True, timeout=timeout)
        assert r.returncode == 0, (f"docs/{block.page}:{block.line} exited {r.returncode}\n$ {block.code}\n"
                                   f"--- stdout\n{r.stdout[-3000:]}\n--- stderr\n{r.stderr[-3000:]}")


FAST = [p for p in checked_pages() if any(b.runs_fast for b in command_blocks(p))]
SLOW = [p for p in checked_pages() if any(b.mark == "run: slow" for b in command_blocks(p))]


@pytest.mark.parametrize("page", FAST, ids=lambda p: p.stem)
def test_runnable_blocks(page: Path, tmp_path: Path) -> None:
    run_blocks([b for b in command_blocks(page) if b.runs_fast], tmp_path, timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("page", SLOW, ids=lambda p: p.stem)
def test_slow_blocks(page: Path, tmp_path: Path) -> None:
    """Every runnable block of the page, fast and slow, in page order (later ones use earlier outputs)."""
    run_blocks([b for b in command_blocks(page) if b.runs_slow], tmp_path, timeout=600)
