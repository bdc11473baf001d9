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


def not_utf8(file: str | Path, exc: UnicodeDecodeError, row: int | None = None) -> DataError:
    """The error for bytes that are not UTF-8, naming the byte and where (a bare ``UnicodeDecodeError``
    does not say which of several inputs was wrong)."""
    byte = exc.object[exc.start:exc.start + 1].hex()
    return DataError(file, row, None, f"not UTF-8 text (byte 0x{byte} at offset {exc.start}"
                     + (" of this line" if row is not None else "") + "); convert the file to UTF-8")

