"""Helpers shared by CLI commands: config from file + flags + overrides."""

from __future__ import annotations

from pathlib import Path

from memrl.config import MemRLConfig, load_config


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


def _literal(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(str(v) for v in value) + "]"
    return str(value)


def quiet_hub_progress() -> None:
    """No per-file "Loading weights"/"Writing model shards" bars from transformers and the Hub:
    memrl prints its own progress, and those bars drown it (MEMRL_HF_PROGRESS=1 keeps them)."""
    import os

    if os.environ.get("MEMRL_HF_PROGRESS") == "1":
        return
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    disable_progress_bars()
