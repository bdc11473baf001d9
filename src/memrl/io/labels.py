"""Short names for folders shown side by side (plot legends, summary tables)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def folder_labels(folders: Sequence[Path]) -> list[str]:
    """The folder names, with as many parent folders as it takes to tell them apart
    (``a/run`` and ``b/run``); the full paths when the same folder is given twice."""
    parts = [p.resolve().parts for p in folders]
    for depth in range(1, max(len(p) for p in parts) + 1):
        labels = ["/".join(p[-depth:]) for p in parts]
        if len(set(labels)) == len(labels):
            return labels
    return [str(p) for p in folders]
