"""Resolve a model/tokenizer spec to a loaded object, offline-friendly.

A spec is a local folder or a hub id. Hub downloads are the user's choice; when
they fail (no network, ``HF_HUB_OFFLINE=1``) the error says what was tried.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ModelNotFoundError(RuntimeError):
    """A model or tokenizer spec that could not be loaded."""


def load_tokenizer(spec: str) -> Any:
    """A ``transformers`` tokenizer from a folder or hub id."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(spec)
    except (OSError, ValueError) as exc:
        where = "folder" if Path(spec).exists() else "hub id (no local folder of that name)"
        raise ModelNotFoundError(f"cannot load tokenizer {spec!r} as a {where}: {exc}") from None
