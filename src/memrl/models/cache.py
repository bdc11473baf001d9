"""Where memrl keeps the models it builds or converts (the tiny test models, SmolLM2's HF folder).

Its own module so that :mod:`memrl.models.resolve` (which dispatches aliases to their builders)
and the builders (:mod:`memrl.models.smol`) both read it without importing each other.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """``$MEMRL_CACHE``, else ``~/.cache/memrl``; read on every call so tests can point it elsewhere."""
    return Path(os.environ.get("MEMRL_CACHE", Path.home() / ".cache" / "memrl"))
