"""The command blocks of the docs pages and their run markers.

A fenced ``bash`` block in a quickstart or guide is preceded by an HTML comment (invisible on
GitHub and on the site) that says what the tests do with it:

    <!-- run -->                 executed by tests/docs/test_commands.py (tiny scale, seconds)
    <!-- run: slow -->           executed only by the slow suite (MEMRL_SLOW=1, make test-slow)
    <!-- skip: gpu (reason) -->  never executed; the first word is why: gpu, network, long, server, data

Blocks of one page run in order in one scratch folder (later blocks use what earlier ones wrote),
with ``configs/`` and ``examples/`` of the checkout linked in and the virtualenv's ``memrl`` on PATH.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Pages whose command blocks must be marked. docs/guides/async.md has its own owner and its own checks.
NOT_CHECKED = {"guides/async.md"}
SKIP_REASONS = {"gpu", "network", "long", "server", "data"}
SHELLS = {"bash", "sh", "shell", "console"}

_MARK = re.compile(r"^<!--\s*(run(?::\s*slow)?|skip:\s*(\w+)[^>]*)\s*-->\s*$")
_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    page: str          # relative to docs/ (../README.md for the README)
    line: int          # 1-based line of the opening fence
    lang: str
    code: str
    mark: str | None   # "run", "run: slow", "skip: <reason> ...", or None when unmarked

    @property
    def runs_fast(self) -> bool:
        return self.mark == "run"

    @property
    def runs_slow(self) -> bool:
        return self.mark is not None and self.mark.startswith("run")

    @property
    def skip_reason(self) -> str | None:
        m = _MARK.match(f"<!-- {self.mark} -->") if self.mark else None
        return m.group(2) if m and m.group(2) else None


def blocks(page: Path) -> list[Block]:
    """Every fenced code block of a Markdown page, with the marker comment on the line before it."""
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i].strip())
        if not m:
            i += 1
            continue
        fence, lang, start = m.group(1), m.group(2), i
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        prev = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        mark = _MARK.match(prev)
        where = page.relative_to(DOCS) if page.is_relative_to(DOCS) else Path("..") / page.relative_to(REPO)
        out.append(Block(str(where), start + 1, lang, "\n".join(lines[start + 1:j]),
                         mark.group(1).strip() if mark else None))
        i = j + 1
    return out


def checked_pages() -> list[Path]:
    """The quickstarts and guides: every command block there is marked."""
    pages = sorted((DOCS / "start").glob("*.md")) + sorted((DOCS / "guides").glob("*.md"))
    return [p for p in pages if str(p.relative_to(DOCS)) not in NOT_CHECKED]


def command_blocks(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in SHELLS]
