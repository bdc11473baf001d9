"""memrl: RL for multi-conversation LLM agents.

``from memrl import Workflow, Episode, Trainer``: a workflow object, the episode it records
into, and the trainer that runs it (loaded on first use, so ``import memrl`` stays light).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {"Workflow": "memrl.workflows.api", "Episode": "memrl.workflows.api", "Generation": "memrl.workflows.api",
         "Trainer": "memrl.train.trainer", "load_config": "memrl.config"}
__all__ = [*_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'memrl' has no attribute {name!r}")
