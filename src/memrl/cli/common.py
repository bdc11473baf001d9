"""Helpers shared by CLI commands: config from file + flags + overrides."""

from __future__ import annotations

import json
from pathlib import Path

from memrl.config import MemRLConfig, load_config
from memrl.models.resolve import quiet_hub_progress  # noqa: F401 (its old home; the Trainer calls it too)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 step``, ``3 steps``: a count with its noun in the right number (``wrote 1 files`` read as a slip)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def resolve_config(config: Path | None, overrides: list[str] | None, flags: dict[str, object]) -> MemRLConfig:
    """Defaults < YAML file < explicit flags < dotted overrides (the last word wins).

    A bare ``key=value`` in the CONFIG position is treated as an override.
    """
    items = list(overrides or [])
    if config is not None and "=" in str(config) and not config.exists():
        items.insert(0, str(config))
        config = None
    flag_items = [f"{k}={_literal(v)}" for k, v in flags.items() if v is not None]
    return load_config(config, flag_items + items)


def given_keys(config: Path | None, overrides: list[str] | None, flags: dict[str, object]) -> set[str]:
    """The dotted keys set on the command line (flags given, overrides), as opposed to in the YAML file."""
    items = list(overrides or [])
    if config is not None and "=" in str(config) and not config.exists():
        items.append(str(config))
    return {k for k, v in flags.items() if v is not None} | {item.split("=", 1)[0].strip() for item in items}


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):  # JSON, so an item like telecom's "[mobile_data_issue]a|b" stays one string
        return json.dumps(list(value), ensure_ascii=False)
    return str(value)
