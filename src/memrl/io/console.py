"""The console that progress, warning and step lines go to (standard error).

On a terminal rich wraps lines at the window's width, as a reader wants. Piped into a log file or CI,
there is no window: rich would assume 80 columns and break an error naming a file and row, or a step line of
ten metrics, across lines, so ``grep`` finds half of it. There each ``print`` stays one line, however long.
"""

from __future__ import annotations

import sys

from rich.console import Console

PIPED_WIDTH = 160  # what rules and tables (which must have a width) get when nobody's window says otherwise


def log_console() -> Console:
    """A stderr console: the window's width on a terminal; unwrapped lines (``soft_wrap``) in a pipe or file."""
    if sys.stderr.isatty():
        return Console(stderr=True)
    return Console(stderr=True, width=PIPED_WIDTH, soft_wrap=True)
