"""The error for bad input files, pointing at the exact place: ``file:row:field: message``.

It lives in the bottom layer because the record readers here raise it; :mod:`memrl.data.errors`
re-exports it for the data readers, and the CLI turns it into one line.
"""

from __future__ import annotations

from pathlib import Path


class DataError(ValueError):
    """Bad input data. ``str(err)`` is ``file:row:field: message`` (row is 1-based)."""

    def __init__(self, file: str | Path, row: int | None, field: str | None, message: str) -> None:
        self.file = str(file)
        self.row = row
        self.field = field
        self.message = message
        where = self.file
        if row is not None:
            where += f":{row}"
        if field:
            where += f":{field}"
        super().__init__(f"{where}: {message}")
