"""Reading ``metrics.jsonl`` back: one row per training step, written by :class:`memrl.train.tracking.Tracker`.

Training resumes from it, and ``memrl view`` / ``memrl train --plot`` show it, so the reader sits
in the bottom layer where all of them may import it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_rows(path: Path, warn: Callable[[str], None], skip_bad: bool = False) -> list[dict[str, Any]]:
    """Rows of a metrics.jsonl; a torn last line (the process died mid-write) is dropped with a warning.

    Any other bad line is an error naming the file and line: it was not written by a dying process, so
    silently skipping it would hide damage from a resume. ``skip_bad``: a reader that only shows the run
    (``memrl view``) skips it with that warning instead, so the rest stays in reach.
    """
    lines = path.read_text(errors="replace").splitlines()
    last = max((i for i, ln in enumerate(lines) if ln.strip()), default=-1)
    rows: list[dict[str, Any]] = []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            row = json.loads(ln)
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                raise ValueError("not a metrics row (an object with an integer step)")
        except ValueError as err:
            if i == last:
                warn(f"{path}: dropping the torn last line {i + 1} (the run was stopped while writing it)")
                break
            if skip_bad:
                warn(f"{path}:{i + 1}: {err} (skipped)")
                continue
            raise ValueError(f"{path}, line {i + 1}: {err}") from None
        rows.append(row)
    return rows


def read_metrics(run_dir: Path, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """All rows of ``run_dir/metrics.jsonl`` (warnings go to stderr unless ``warn`` is given)."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"no metrics.jsonl in {run_dir}")
    return read_rows(path, warn or (lambda msg: print(f"warning: {msg}", file=sys.stderr)))


def numeric_keys(rows: list[dict[str, Any]]) -> list[str]:
    """Every key with a number (not a boolean) in some row, ``step`` aside, in first-seen order: what can be
    drawn as a curve (``memrl plot``, ``memrl view``)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                seen.setdefault(key, None)
    return list(seen)
