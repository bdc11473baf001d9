"""Whole text and JSON files read as UTF-8 whatever the locale, every failure naming the file.

Benchmark folders (τ²-bench domains, policies, split files) are read whole; a stray Latin-1 byte or a
hand-edited comma should be one line naming the file, not a ``UnicodeDecodeError`` traceback that
does not say which of a dozen files was wrong.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memrl.io.errors import DataError, not_utf8


def read_text(path: str | Path) -> str:
    """The file's text; not UTF-8, missing or a folder is a :class:`DataError` naming it."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise not_utf8(path, exc) from None
    except IsADirectoryError:
        raise DataError(path, None, None, "is a folder, expected a file") from None
    except FileNotFoundError:
        raise DataError(path, None, None, "file not found") from None


def read_json(path: str | Path) -> Any:
    """The file parsed as JSON; bad JSON names the file, line and column."""
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as err:
        raise DataError(path, None, None, f"not valid JSON ({err})") from None


def read_json_or_lines(path: str | Path) -> Any:
    """One JSON document as it is, else JSON lines as a list; a bad line is ``file:line`` (blank lines are
    skipped)."""
    text = read_text(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    rows = []
    for row, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            why = f"not valid JSON (neither one JSON document nor JSON lines): {err.msg} (column {err.colno})"
            raise DataError(path, row, None, why) from None
    return rows


def utf8_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line that is not blank, read as bytes and decoded one line at a time, so
    a byte that is not UTF-8 is reported at ``file:line`` (a text-mode read fails somewhere in a buffer)."""
    with open(path, "rb") as fh:
        for row, raw in enumerate(fh, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise not_utf8(path, exc, row) from None
            if line.strip():
                yield row, line
