"""Reading record files: a JSON array, JSONL, or parquet, with row-numbered errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memrl.data.errors import DataError
from memrl.io.errors import not_utf8 as _not_utf8
from memrl.io.text_files import utf8_lines


def detect_format(path: str | Path) -> str:
    """``json`` (one array), ``jsonl`` or ``parquet``, from the extension, else the first byte."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".jsonl", ".ndjson"):
        return "jsonl"
    with open(p, "rb") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"["):
        return "json"
    return "jsonl"


def _check_file(p: Path) -> None:
    if p.is_dir():
        raise DataError(p, None, None, "is a folder, expected a file (JSON, JSONL or parquet)")
    if not p.is_file():
        raise DataError(p, None, None, "file not found" if not p.exists() else "not a regular file")


def iter_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(row, record)`` pairs with 1-based row numbers; non-objects are errors.

    Every failure, including text that is not UTF-8, is a :class:`DataError` naming the file
    (a bare ``UnicodeDecodeError`` does not say which of several inputs was wrong).
    """
    p = Path(path)
    _check_file(p)
    fmt = detect_format(p)
    if fmt == "json":
        try:
            with open(p, encoding="utf-8") as fh:
                data = json.load(fh)
        except json.JSONDecodeError as exc:
            raise DataError(p, None, None, f"not valid JSON: {exc}") from None
        except UnicodeDecodeError as exc:
            raise _not_utf8(p, exc) from None
        if not isinstance(data, list):
            raise DataError(p, None, None, f"expected a JSON array of records, got {type(data).__name__}")
        for row, rec in enumerate(data, start=1):
            if not isinstance(rec, dict):
                raise DataError(p, row, None, f"expected an object, got {type(rec).__name__}")
            yield row, rec
    elif fmt == "jsonl":
        for row, line in utf8_lines(p):
            try:  # without its line end: a row cut short was reported at "column 1" (of the next line)
                rec = json.loads(line.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                raise DataError(p, row, None, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(rec, dict):
                raise DataError(p, row, None, f"expected an object, got {type(rec).__name__}")
            yield row, rec
    else:
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(p)
        except Exception as exc:  # pyarrow raises several types for corrupt files
            raise DataError(p, None, None, f"not a readable parquet file: {exc}") from None
        row = 0
        for batch in pf.iter_batches(batch_size=64):
            for rec in batch.to_pylist():
                row += 1
                yield row, rec
