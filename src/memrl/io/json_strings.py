"""Every string inside a JSON value: what a search reads, and what a server counts toward a request's size."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def json_strings(value: Any, *, keys: bool = False, max_depth: int | None = None, _depth: int = 0) -> Iterator[str]:
    """The strings of ``value`` (lists, tuples and dicts walked; ``keys``: a dict's keys too), no deeper than
    ``max_depth`` levels (None: all; a server bounds it, since a hostile body can nest without end)."""
    if isinstance(value, str):
        yield value
        return
    if max_depth is not None and _depth >= max_depth:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if keys:
                yield from json_strings(key, keys=keys, max_depth=max_depth, _depth=_depth + 1)
            yield from json_strings(item, keys=keys, max_depth=max_depth, _depth=_depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from json_strings(item, keys=keys, max_depth=max_depth, _depth=_depth + 1)
