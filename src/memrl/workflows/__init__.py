"""Workflows: async agent loops that turn a sample into a scored Trajectory."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from memrl.types import Trajectory

Workflow = Callable[..., Awaitable[Trajectory]]


def get_workflow(name: str) -> Workflow:
    """The workflow function registered under ``name``."""
    if name == "memagent":
        from memrl.workflows.memagent import memagent

        return memagent
    if name == "rememr1":
        from memrl.workflows.rememr1 import rememr1

        return rememr1
    if name == "full_context":
        from memrl.workflows.full_context import full_context

        return full_context
    raise ValueError(f"unknown workflow {name!r}; choose memagent, rememr1 or full_context")


__all__: list[Any] = ["Workflow", "get_workflow"]
