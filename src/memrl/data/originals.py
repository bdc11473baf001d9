"""Text that belongs to the papers' repositories, read at run time from a checkout the user points at.

Under ``--protocol memagent|rememr1`` memrl reproduces the papers' data generators. Their
algorithms (which paragraphs, which random draws, which fields) are memrl's own code; their
*text* (the document template, the filter's prompt) is the authors' and stays in their repository.
memrl therefore reads it from the user's checkout (``--memagent-repo`` / ``MEMRL_MEMAGENT_REPO``,
``--rememr1-repo`` / ``MEMRL_REMEMR1_REPO``), parsing the ``.py`` files as text with :mod:`ast`:
nothing of theirs is imported or executed. A missing checkout is one line saying where to get it.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Original:
    """A paper's repository: where to get it and how the user points memrl at a checkout."""

    name: str
    url: str
    commit: str
    flag: str
    env: str


MEMAGENT = Original("MemAgent", "https://github.com/BytedTsinghua-SIA/MemAgent",
                    "76b7a658988e4ea53d7388a62de6c0ce79084146", "--memagent-repo", "MEMRL_MEMAGENT_REPO")
REMEMR1 = Original("ReMemR1", "https://github.com/syr-cn/ReMemR1",
                   "43e69f38b97f7899cccadb4176b0fed003262ce3", "--rememr1-repo", "MEMRL_REMEMR1_REPO")


class OriginalMissing(ValueError):
    """The checkout (or a file or constant in it) that a paper's protocol reads is not there."""


def checkout(original: Original, given: str | Path | None) -> Path:
    """The checkout folder: the flag's value, else the environment variable; one-line error when neither."""
    raw = str(given) if given else os.environ.get(original.env, "")
    if not raw:
        raise OriginalMissing(
            f"{original.flag}: this protocol reads {original.name}'s own text from a checkout of its repository; "
            f"clone {original.url} (commit {original.commit[:7]}) and pass {original.flag} PATH or set {original.env}")
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise OriginalMissing(f"{original.flag}: {path} is not a folder (expected a checkout of {original.url}, "
                              f"commit {original.commit[:7]})")
    return path


def _assigned_strings(tree: ast.AST, name: str) -> list[str]:
    """Every string constant assigned to ``name`` anywhere in ``tree`` (module level or inside functions)."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, str):
                found.append(value)
    return found


def read_string_constant(original: Original, root: Path, relpath: str, name: str) -> str:
    """The string literal assigned to ``name`` in ``root/relpath``, parsed (never run).

    Every assignment must agree: a file that gives the name two different texts is refused
    rather than guessed at.
    """
    path = root / relpath
    try:
        source = path.read_text(encoding="utf-8")
    except OSError:
        raise OriginalMissing(f"{original.flag}: {path} not found; is {root} a checkout of {original.url} "
                              f"(commit {original.commit[:7]})?") from None
    try:
        values = set(_assigned_strings(ast.parse(source, filename=str(path)), name))
    except SyntaxError as err:
        raise OriginalMissing(f"{original.flag}: cannot parse {path}: {err.msg} (line {err.lineno})") from None
    if len(values) != 1:
        what = "no string" if not values else f"{len(values)} different strings"
        raise OriginalMissing(f"{original.flag}: {path} assigns {what} to {name}; expected one, as at "
                              f"{original.name} commit {original.commit[:7]}")
    return values.pop()
