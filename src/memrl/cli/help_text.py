"""Command help that wraps to the terminal: docstring paragraphs are reflowed before typer shows them.

Why: typer keeps a docstring's single line breaks in a command's description and then wraps each line
again to the terminal's width, so text written at 110 columns shows as ragged half-lines in an
80-column terminal (``memrl tinker --help`` broke every other line). Here each paragraph's lines are
joined into one, which rich then wraps cleanly at any width. A list item (``- ``, ``* ``, ``1. ``), an
indented line (an example command) and a paragraph starting with ``\\b`` (click's "keep as is") keep
their line breaks.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

_ITEM = re.compile(r"(?:[-*•]|\d+[.)])\s")


def reflow(text: str) -> str:
    """``text`` with each paragraph's wrapped lines joined (see the module docstring for what is kept)."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else _joined(p) for p in paragraphs)


def _joined(paragraph: str) -> str:
    lines: list[str] = []
    kinds: list[str] = []  # "text", "item" (a list item and its continuation) or "code" (an indented line)
    for line in paragraph.split("\n"):
        if _ITEM.match(line):
            kind = "item"
        elif line.startswith((" ", "\t")):
            kind = "item" if kinds and kinds[-1] == "item" else "code"  # an item's indented continuation
        else:
            kind = kinds[-1] if kinds and kinds[-1] != "code" else "text"
        if lines and kind != "code" and kinds[-1] != "code" and not _ITEM.match(line):
            lines[-1] = f"{lines[-1].rstrip()} {line.strip()}"
        else:
            lines.append(line.rstrip())
            kinds.append(kind)
    return "\n".join(lines)


def reflow_app(app: Any) -> None:
    """Give every command of ``app`` and of its sub-apps a reflowed help text (a group's own help is one line)."""
    for info in app.registered_commands:
        text = info.help if isinstance(info.help, str) else inspect.getdoc(info.callback)
        if text:
            info.help = reflow(text)
    for group in app.registered_groups:
        reflow_app(group.typer_instance)
