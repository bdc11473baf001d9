"""Reading the records ``memrl view`` shows, one bad record at a time.

A page of a run is worth having even when one of its records is broken (an edited file, a record
from another tool, a partly written line): a record that cannot be shown is skipped with a
one-line warning naming ``file:line`` (and the field, see :mod:`memrl.io.record_check`), and
the page shows the rest.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memrl.io.record_check import record_problem

Warn = Callable[[str], None]


def read_jsonl(path: Path, warn: Warn) -> list[tuple[int, Any]]:
    """(line number, parsed value) of each JSON line; a line that is not JSON is warned about and left out."""
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except ValueError:
            warn(f"{path}:{n}: not JSON (skipped)")
    return rows


def usable_rollout(record: Any, where: str, warn: Warn) -> bool:
    """Whether a rollout record can be decoded and shown; if not, say why (``where`` is ``file:line``)."""
    bad = record_problem(record)
    if bad is None:
        return True
    field, why = bad
    warn(f"{where}:{field + ': ' if field else ' '}{why} (record skipped)")
    return False


def shown_or_skipped(build: Callable[[], dict[str, Any]], where: str, warn: Warn) -> dict[str, Any] | None:
    """``build()``, or None with a warning when the record still cannot be shown (a field of a kind
    no check foresaw): one record never costs the whole page."""
    try:
        return build()
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        warn(f"{where}: cannot be shown ({type(exc).__name__}: {exc}) (record skipped)")
        return None


def read_json_object(path: Path, warn: Warn) -> dict[str, Any] | None:
    """A JSON file that must hold an object (an eval episode, results.json); anything else is warned about."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        warn(f"{path}: not JSON (skipped)")
        return None
    if not isinstance(value, dict):
        warn(f"{path}: expected a JSON object, got {type(value).__name__} (skipped)")
        return None
    return value
